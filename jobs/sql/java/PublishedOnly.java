package trajpriv;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.spark.SparkContext;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.catalog.HiveTableRelation;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.UserDefinedExpression;
import org.apache.spark.sql.catalyst.expressions.objects.Invoke;
import org.apache.spark.sql.catalyst.expressions.objects.NewInstance;
import org.apache.spark.sql.catalyst.expressions.objects.StaticInvoke;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.DeserializeToObject;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.types.ObjectType;
import scala.Function1;
import scala.Option;
import scala.Tuple2;
import scala.runtime.BoxedUnit;

/**
 * A Spark session extension for the analysts' endpoints (spark.sql.extensions): every analyzed
 * plan must be read-only SQL over published catalog tables, computed by Spark's built-in
 * expressions. Why in the JVM: Thrift and Connect clients send SQL and plans straight to the
 * driver, past any check in Python. Why an allow-list: a plan node or expression Spark adds in
 * a later version is refused until someone has looked at it, instead of running.
 *
 * Plan nodes: the relational ones named in NODES, the read-only commands in READ_COMMANDS, and
 * relations of catalog tables of the published databases. Everything else is refused, among
 * them ScriptTransformation (TRANSFORM ... USING), MapInPandas, MapInArrow, FlatMapGroupsInPandas
 * (applyInPandas), FlatMapCoGroupsInPandas, the typed Scala operators (MapElements, MapPartitions,
 * AppendColumns, TypedFilter), streaming sources, file relations and every other command.
 *
 * Expressions: the classes of org.apache.spark.sql.catalyst.expressions and its sub-packages
 * (literals, attributes, arithmetic, predicates, casts, string, date, math, collection, JSON/XML,
 * variant, higher-order functions over SQL lambdas, aggregate and window functions, subquery
 * expressions), except user-defined ones (UserDefinedExpression: ScalaUDF, Python UDFs, UDAFs
 * and UDTFs, Hive UDFs, typed aggregators), CallMethodViaReflection (reflect, java_method,
 * try_reflect) and the objects sub-package (calls into Java), which is admitted only where a
 * built-in function calls a Spark class. Classes outside that package (Hive UDF wrappers,
 * org.apache.spark.sql.execution's ScalaUDAF and TypedAggregateExpression) are refused.
 *
 * The same rule also puts each session's jobs in a FAIR pool of its own and starts the per-query
 * time limit (QueryLimits) the first time it runs.
 */
public class PublishedOnly implements Function1<SparkSessionExtensions, BoxedUnit> {

  static final Set<String> DATABASES = new HashSet<>(Arrays.asList(
      System.getProperty("trajpriv.published", "trajpriv_pub").split(",")));

  static final Set<String> READ_COMMANDS = new HashSet<>(Arrays.asList(
      "ShowTables", "ShowTablesCommand", "ShowTableExtended", "ShowViews", "ShowNamespaces",
      "ShowCatalogs", "ShowColumns", "ShowColumnsCommand", "ShowTableProperties",
      "ShowTablePropertiesCommand", "ShowPartitions", "ShowPartitionsCommand", "ShowFunctions",
      "ShowFunctionsCommand", "ShowCreateTable", "ShowCreateTableCommand", "DescribeRelation",
      "DescribeTableCommand", "DescribeColumn", "DescribeColumnCommand", "DescribeNamespace",
      "DescribeDatabaseCommand", "DescribeFunction", "DescribeFunctionCommand", "ExplainCommand",
      "SetCommand", "ResetCommand", "SetCatalogAndNamespace", "SetNamespaceCommand",
      "SetCatalogCommand", "ShowCurrentNamespace", "ShowCurrentNamespaceCommand"));

  /** Relational plan nodes (org.apache.spark.sql.catalyst.plans.logical) that run no code. */
  static final Set<String> NODES = new HashSet<>(Arrays.asList(
      "Project", "Filter", "Join", "LateralJoin", "AsOfJoin", "Aggregate", "Window",
      "WindowGroupLimit", "Sort", "GlobalLimit", "LocalLimit", "Offset", "Tail", "Union",
      "Intersect", "Except", "Distinct", "Deduplicate", "SubqueryAlias", "View", "Expand",
      "Generate", "Sample", "Repartition", "RepartitionByExpression", "RebalancePartitions",
      "WithCTE", "CTERelationDef", "CTERelationRef", "UnionLoop", "UnionLoopRef", "ResolvedHint",
      "CollectMetrics", "Subquery", "ReturnAnswer", "LocalRelation", "OneRowRelation", "Range",
      "EmptyRelation"));

  /** Leaves the read-only commands hold (what SHOW and DESCRIBE name). */
  static final Set<String> RESOLVED_LEAVES = new HashSet<>(Arrays.asList(
      "ResolvedNamespace", "ResolvedTable", "ResolvedPersistentView", "ResolvedTempView",
      "ResolvedIdentifier", "ResolvedFunc", "ResolvedNonPersistentFunc", "ResolvedPersistentFunc",
      "ResolvedCatalog", "ResolvedDBObjectName"));

  static final String LOGICAL = "org.apache.spark.sql.catalyst.plans.logical.";
  static final String ANALYSIS = "org.apache.spark.sql.catalyst.analysis.";
  static final String EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions.";
  static final String OBJECTS = EXPRESSIONS + "objects.";

  /**
   * Settings a session may not SET (SQL SET, Connect's spark.conf.set): file reads, SQL
   * scripting, the scheduler pool and the limits. The guard itself (spark.sql.extensions) and
   * Connect's interceptors are static settings Spark refuses to change at run time.
   */
  static final Set<String> PROTECTED = new HashSet<>(Arrays.asList(
      "spark.sql.runsqlonfiles", "spark.sql.scripting.enabled", "spark.scheduler.pool",
      "spark.sql.thriftserver.scheduler.pool", "spark.sql.thriftserver.querytimeout",
      "spark.sql.legacy.setcommandrejectssparkcoreconfs", "spark.sql.extensions"));

  static final String POOL_PROPERTY = "spark.scheduler.pool";

  private static final AtomicBoolean LIMITS_STARTED = new AtomicBoolean();

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    Function1<Object, Function1<LogicalPlan, BoxedUnit>> builder = session -> plan -> {
      SparkSession spark = (SparkSession) session;
      startLimits(spark.sparkContext());
      check(plan);
      // the thread that analyzes a query submits its jobs: they go to this session's pool
      spark.sparkContext().setLocalProperty(POOL_PROPERTY, "session-" + spark.sessionUUID());
      return BoxedUnit.UNIT;
    };
    extensions.injectCheckRule((Function1) builder);
    return BoxedUnit.UNIT;
  }

  static void startLimits(SparkContext sc) {
    if (LIMITS_STARTED.compareAndSet(false, true)) {
      QueryLimits.start(sc);
    }
  }

  static void check(LogicalPlan plan) {
    if (isResultDecoder(plan)) {
      checkResultDecoder((DeserializeToObject) plan);
      return;
    }
    plan.foreachWithSubqueries(node -> {
      checkNode(node);
      return BoxedUnit.UNIT;
    });
  }

  static void checkNode(LogicalPlan node) {
    String name = node.getClass().getName();
    String kind = node.getClass().getSimpleName();
    if (node instanceof Command) {
      if (!READ_COMMANDS.contains(kind)) {
        refuse("it changes something or runs code (" + kind + "); the endpoints are read-only");
      }
      if (node instanceof SetCommand) {
        checkSet(((SetCommand) node).kv());
      }
    } else if (node instanceof LogicalRelation) {
      Option<CatalogTable> table = ((LogicalRelation) node).catalogTable();
      if (table.isEmpty()) {
        refuse("it reads files directly, not a published table");
      }
      checkTable(table.get());
    } else if (node instanceof HiveTableRelation) {
      checkTable(((HiveTableRelation) node).tableMeta());
    } else if (name.equals(LOGICAL + "ScriptTransformation")) {
      refuse("it runs a program on the server (TRANSFORM ... USING, ScriptTransformation)");
    } else if (!(name.startsWith(LOGICAL) && NODES.contains(kind))
        && !(name.startsWith(ANALYSIS) && RESOLVED_LEAVES.contains(kind))) {
      refuse("it is not a read of published tables by built-in SQL (" + kind + ")");
    }
    node.expressions().foreach(e -> {
      ((Expression) e).foreach(x -> {
        checkExpression(x);
        return BoxedUnit.UNIT;
      });
      return BoxedUnit.UNIT;
    });
  }

  static final String ENCODER = "org.apache.spark.sql.catalyst.encoders.ExpressionEncoder";

  /**
   * Whether `plan` is the one a result's decoder is bound with, not a query: to turn the rows of
   * an already checked query into Java Rows (the Thrift server's collect, Dataset.showString
   * for Connect's show), ExpressionEncoder.resolveAndBind analyzes DeserializeToObject over an
   * empty LocalRelation of the query's output attributes with the session's analyzer, so this
   * rule sees it too. It reads nothing and runs on no rows; its deserializer is Spark's, built
   * from the output's types. Both must hold: that shape, and this check called by
   * resolveAndBind itself (the first frame past the analyzer), which analyzes nothing but that
   * shape. A user's plan is analyzed from Dataset.ofRows, so neither SQL nor a Connect plan can
   * reach this exemption; and what it admits is still checked (checkResultDecoder).
   */
  static boolean isResultDecoder(LogicalPlan plan) {
    if (!(plan instanceof DeserializeToObject)
        || !(((DeserializeToObject) plan).child() instanceof LocalRelation)) {
      return false;
    }
    LocalRelation rows = (LocalRelation) ((DeserializeToObject) plan).child();
    return rows.data().isEmpty() && !rows.isStreaming() && calledByResolveAndBind();
  }

  static boolean calledByResolveAndBind() {
    return StackWalker.getInstance().walk(frames -> frames
        .filter(f -> !f.getClassName().startsWith("trajpriv.")
            && !f.getClassName().startsWith(ANALYSIS) && !f.getClassName().startsWith("scala."))
        .findFirst()
        .map(f -> f.getClassName().equals(ENCODER) && f.getMethodName().equals("resolveAndBind"))
        .orElse(false));
  }

  /**
   * A result decoder's expressions: Spark's built-in ones, no user code or reflection, and its
   * calls into Java (objects: CreateExternalRow, StaticInvoke of DateTimeUtils, MapObjects) only
   * on the value classes of SQL types (DECODER_CLASSES), so the exemption cannot call anything
   * else even if a later Spark built the decoder from other input.
   */
  static void checkResultDecoder(DeserializeToObject plan) {
    plan.deserializer().foreach(x -> {
      checkUserCode(x);
      String name = x.getClass().getName();
      if (!name.startsWith(EXPRESSIONS)) {
        refuse("its result decoder uses " + x.getClass().getSimpleName());
      }
      if (name.startsWith(OBJECTS)) {
        for (Class<?> target : decoderTargets(x)) {
          if (!decoderClass(target)) {
            refuse("its result decoder calls into " + target.getName());
          }
        }
      }
      return BoxedUnit.UNIT;
    });
    checkNode(plan.child());
  }

  /** The Java classes an objects expression calls or returns. */
  static List<Class<?>> decoderTargets(Expression x) {
    List<Class<?>> out = new ArrayList<>();
    if (x.dataType() instanceof ObjectType) {
      out.add(((ObjectType) x.dataType()).cls());
    }
    if (x instanceof StaticInvoke) {
      out.add(((StaticInvoke) x).staticObject());
    } else if (x instanceof Invoke) {
      Object target = ((Invoke) x).targetObject().dataType();
      if (target instanceof ObjectType) {
        out.add(((ObjectType) target).cls());
      }
    } else if (x instanceof NewInstance) {
      out.add(((NewInstance) x).cls());
    }
    return out;
  }

  /** Packages and classes of the Java values of SQL types (what a Row holds). */
  static final String[] DECODER_CLASSES = {"org.apache.spark.sql.", "org.apache.spark.unsafe.",
      "scala.collection.", "scala.math.", "scala.Option", "scala.Some", "scala.None",
      "java.time.", "java.math.", "java.sql.Date", "java.sql.Timestamp", "java.lang.Object",
      "java.lang.String", "java.lang.Boolean", "java.lang.Byte", "java.lang.Short",
      "java.lang.Integer", "java.lang.Long", "java.lang.Float", "java.lang.Double",
      "java.lang.Character"};

  static boolean decoderClass(Class<?> cls) {
    while (cls.isArray()) {
      cls = cls.getComponentType();
    }
    if (cls.isPrimitive()) {
      return true;
    }
    String name = cls.getName();
    for (String allowed : DECODER_CLASSES) {
      boolean match = allowed.endsWith(".") ? name.startsWith(allowed)
          : (name.equals(allowed) || name.startsWith(allowed + "$"));
      if (match) {
        return true;
      }
    }
    return false;
  }

  static void checkUserCode(Expression x) {
    String kind = x.getClass().getSimpleName();
    if (x instanceof UserDefinedExpression || kind.contains("UDF") || kind.contains("UDAF")
        || kind.contains("UDTF")) {
      refuse("it runs user code (" + kind + "): the endpoints run built-in SQL functions only");
    }
    if (kind.startsWith("CallMethodViaReflection") || kind.equals("TryReflect")) {
      refuse("it calls Java methods (reflect, java_method)");
    }
  }

  static void checkExpression(Expression x) {
    String name = x.getClass().getName();
    String kind = x.getClass().getSimpleName();
    checkUserCode(x);
    if (name.startsWith(OBJECTS)) {
      if (!sparkOwnCall(x)) {
        refuse("it calls into Java (" + kind + ")");
      }
    } else if (!name.startsWith(EXPRESSIONS)) {
      refuse("it uses an expression that is not a built-in SQL function (" + kind + ")");
    }
  }

  /** A StaticInvoke or Invoke that a built-in function made: its target is a Spark class. */
  static boolean sparkOwnCall(Expression x) {
    if (x instanceof StaticInvoke) {
      return ((StaticInvoke) x).staticObject().getName().startsWith("org.apache.spark.");
    }
    if (x instanceof Invoke) {
      Object type = ((Invoke) x).targetObject().dataType();
      // a method of a Catalyst value (UTF8String, ArrayData) or of a Spark object
      return !(type instanceof ObjectType)
          || ((ObjectType) type).cls().getName().startsWith("org.apache.spark.");
    }
    return false;
  }

  static void checkSet(Option<Tuple2<String, Option<String>>> kv) {
    if (kv.isDefined() && kv.get()._2().isDefined() && isProtected(kv.get()._1())) {
      refuse("SET " + kv.get()._1() + " is the endpoints' own setting; a session may not change"
          + " it");
    }
  }

  static boolean isProtected(String key) {
    String k = key.trim().toLowerCase();
    return PROTECTED.contains(k) || k.startsWith("spark.trajpriv.")
        || k.startsWith("spark.connect.") || k.startsWith("spark.sql.connect.");
  }

  static void checkTable(CatalogTable table) {
    String db = table.identifier().database().getOrElse(() -> "");
    if (!DATABASES.contains(db)) {
      refuse("it reads " + table.identifier().unquotedString());
    }
  }

  static void refuse(String why) {
    throw new TrajprivRefusal(refusal(why));
  }

  static String refusal(String why) {
    return "refused: " + why + ". Analysts read the published zone ("
        + String.join(", ", DATABASES) + ") only.";
  }

  /** The refusal clients see (an unchecked exception: a check rule may throw no other). */
  public static class TrajprivRefusal extends RuntimeException {
    public TrajprivRefusal(String message) {
      super(message);
    }
  }
}
