package trajpriv;

import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.connect.proto.ConfigRequest;
import org.apache.spark.connect.proto.KeyValue;
import org.sparkproject.connect.grpc.ForwardingServerCallListener;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;
import org.sparkproject.connect.protobuf.Descriptors.FieldDescriptor;
import org.sparkproject.connect.protobuf.Message;

/**
 * A Spark Connect interceptor (spark.connect.grpc.interceptor.classes) that lets through only
 * what a read-only client of published tables sends, before Spark plans anything.
 *
 * Why before planning: some user code runs while Spark analyzes a plan, before the
 * PublishedOnly check sees it (a Python UDTF's `analyze`, a Python data source's schema, a JDBC
 * source's connection), and artifacts (jars, Python files, archives) are loaded outside any
 * plan. So: the gRPC methods in METHODS only (no AddArtifacts, ArtifactStatus, CloneSession);
 * commands: SQL only; relations: the types in RELATIONS only (no mapInPandas, applyInPandas,
 * co-grouped applies, inline UDTFs or data sources, cached or ML relations, extensions);
 * catalog calls: the reading ones; no message of the types in DENIED anywhere in a request
 * (Python, Scala and Java UDFs, typed aggregators, file and format reads, caching, plugin
 * extensions); no Config.set of a protected key (PublishedOnly.isProtected).
 */
public class ConnectGate implements ServerInterceptor {

  static final Set<String> METHODS = new HashSet<>(Arrays.asList(
      "ExecutePlan", "AnalyzePlan", "Config", "Interrupt", "ReattachExecute", "ReleaseExecute",
      "ReleaseSession", "FetchErrorDetails", "GetStatus"));

  static final String P = "spark.connect.";

  /** For these messages, every field that is set must be of one of the listed types. */
  static final Map<String, Set<String>> ONLY = new HashMap<>();

  static {
    ONLY.put(P + "Command", names("SqlCommand"));
    ONLY.put(P + "Relation", names("RelationCommon", "Read", "Project", "Filter", "Join",
        "SetOperation", "Sort", "Limit", "Aggregate", "SQL", "LocalRelation", "Sample", "Offset",
        "Deduplicate", "Range", "SubqueryAlias", "Repartition", "ToDF", "WithColumnsRenamed",
        "ShowString", "Drop", "Tail", "WithColumns", "Hint", "Unpivot", "ToSchema",
        "RepartitionByExpression", "CollectMetrics", "HtmlString", "WithRelations", "Transpose",
        "UnresolvedTableValuedFunction", "LateralJoin", "AsOfJoin", "NAFill", "NADrop",
        "NAReplace", "StatSummary", "StatCrosstab", "StatDescribe", "StatCov", "StatCorr",
        "StatApproxQuantile", "StatFreqItems", "StatSampleBy", "Catalog"));
    ONLY.put(P + "Catalog", names("CurrentDatabase", "SetCurrentDatabase", "ListDatabases",
        "ListTables", "ListFunctions", "ListColumns", "GetDatabase", "GetTable", "GetFunction",
        "DatabaseExists", "TableExists", "FunctionExists", "IsCached", "CurrentCatalog",
        "SetCurrentCatalog", "ListCatalogs", "ListViews", "GetTableProperties",
        "GetCreateTableString"));
  }

  static final Map<String, String> DENIED = new HashMap<>();

  static {
    String code = "it runs user code on the server (";
    for (String t : new String[] {"CommonInlineUserDefinedFunction", "PythonUDF",
        "ScalarScalaUDF", "JavaUDF", "CommonInlineUserDefinedTableFunction", "PythonUDTF",
        "CommonInlineUserDefinedDataSource", "PythonDataSource", "TypedAggregateExpression"}) {
      DENIED.put(P + t, code + t + ")");
    }
    DENIED.put(P + "Read.DataSource", "it reads a data source or files (spark.read.format/"
        + "load), not a published table");
    DENIED.put(P + "AnalyzePlanRequest.Persist", "it caches data on the server");
    DENIED.put(P + "AnalyzePlanRequest.Unpersist", "it changes the server's cache");
    DENIED.put("google.protobuf.Any", "it uses a Spark Connect extension");
  }

  static Set<String> names(String... types) {
    Set<String> out = new HashSet<>();
    for (String t : types) {
      out.add(P + t);
    }
    return out;
  }

  @Override
  public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers,
      ServerCallHandler<Q, R> next) {
    String full = call.getMethodDescriptor().getFullMethodName();
    String method = full.substring(full.lastIndexOf('/') + 1);
    if (!METHODS.contains(method)) {
      call.close(Status.PERMISSION_DENIED.withDescription(PublishedOnly.refusal(
          "the endpoints take no " + method + " (artifacts: jars, Python files, archives, "
          + "or other user code)")), new Metadata());
      return new ServerCall.Listener<Q>() {};
    }
    return new ForwardingServerCallListener.SimpleForwardingServerCallListener<Q>(
        next.startCall(call, headers)) {
      private boolean refused;

      @Override
      public void onMessage(Q message) {
        String why = message instanceof Message ? denied((Message) message) : null;
        if (why == null) {
          super.onMessage(message);
          return;
        }
        refused = true;
        call.close(Status.PERMISSION_DENIED.withDescription(PublishedOnly.refusal(why)),
            new Metadata());
      }

      @Override
      public void onHalfClose() {
        if (!refused) {  // a refused request is never handed to Spark's handler
          super.onHalfClose();
        }
      }
    };
  }

  /** Why `m` (a whole request, or any message within it) is refused; null when it is not. */
  static String denied(Message m) {
    String type = m.getDescriptorForType().getFullName();
    if (DENIED.containsKey(type)) {
      return DENIED.get(type);
    }
    if (m instanceof ConfigRequest.Set) {
      for (KeyValue pair : ((ConfigRequest.Set) m).getPairsList()) {
        if (PublishedOnly.isProtected(pair.getKey())) {
          return "spark.conf.set(" + pair.getKey() + ") is the endpoints' own setting; a "
              + "session may not change it";
        }
      }
    }
    Set<String> only = ONLY.get(type);
    for (Map.Entry<FieldDescriptor, Object> field : m.getAllFields().entrySet()) {
      Object value = field.getValue();
      for (Object item : value instanceof List ? (List<?>) value : Arrays.asList(value)) {
        if (!(item instanceof Message)) {
          continue;
        }
        Message child = (Message) item;
        String childType = child.getDescriptorForType().getFullName();
        if (only != null && !only.contains(childType)) {
          return "the endpoints take no " + field.getKey().getName() + " ("
              + childType.substring(childType.lastIndexOf('.') + 1) + ") in a "
              + type.substring(P.length()) + ": read-only SQL and DataFrame reads of published"
              + " tables only";
        }
        String why = denied(child);
        if (why != null) {
          return why;
        }
      }
    }
    return null;
  }
}
