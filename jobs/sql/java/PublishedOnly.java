package trajpriv;

import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;

import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.catalog.HiveTableRelation;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LeafNode;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import scala.Function1;
import scala.runtime.BoxedUnit;

/**
 * A Spark session extension for the analysts' endpoints (spark.sql.extensions): every analyzed
 * plan must read catalog tables of the published databases only and change nothing. Why in the
 * JVM: Thrift and Connect clients send SQL and plans straight to the driver, past any check in
 * Python. Allowed: reads of published tables and views, literal rows, and the read-only commands
 * below; refused: any other command (writes, DDL, ADD JAR, CACHE), any relation without a
 * published catalog table (file reads such as spark.read.parquet or parquet.`path`), and calls
 * into Java by reflection.
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

  static final Set<String> LEAVES = new HashSet<>(Arrays.asList(
      "LocalRelation", "OneRowRelation", "Range", "ResolvedNamespace", "ResolvedTable",
      "ResolvedPersistentView", "ResolvedTempView", "ResolvedIdentifier", "ResolvedFunc",
      "ResolvedNonPersistentFunc", "ResolvedPersistentFunc", "ResolvedCatalog",
      "ResolvedDBObjectName"));

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    Function1<Object, Function1<LogicalPlan, BoxedUnit>> builder = session -> plan -> {
      check(plan);
      return BoxedUnit.UNIT;
    };
    extensions.injectCheckRule((Function1) builder);
    return BoxedUnit.UNIT;
  }

  static void check(LogicalPlan plan) {
    plan.foreachWithSubqueries(node -> {
      checkNode(node);
      return BoxedUnit.UNIT;
    });
  }

  static void checkNode(LogicalPlan node) {
    String kind = node.getClass().getSimpleName();
    if (node instanceof Command && !READ_COMMANDS.contains(kind)) {
      refuse("it changes something or runs code (" + kind + "); the endpoints are read-only");
    }
    if (node instanceof LogicalRelation) {
      scala.Option<CatalogTable> table = ((LogicalRelation) node).catalogTable();
      if (table.isEmpty()) {
        refuse("it reads files directly, not a published table");
      }
      checkTable(table.get());
    } else if (node instanceof HiveTableRelation) {
      checkTable(((HiveTableRelation) node).tableMeta());
    } else if (node instanceof LeafNode && !(node instanceof Command) && !LEAVES.contains(kind)) {
      refuse("it reads a source that is not a published table (" + kind + ")");
    }
    node.expressions().foreach(e -> {
      ((Expression) e).foreach(x -> {
        String name = x.getClass().getSimpleName();
        if (name.startsWith("CallMethodViaReflection")) {
          refuse("it calls Java methods (reflect, java_method)");
        }
        return BoxedUnit.UNIT;
      });
      return BoxedUnit.UNIT;
    });
  }

  static void checkTable(CatalogTable table) {
    String db = table.identifier().database().getOrElse(() -> "");
    if (!DATABASES.contains(db)) {
      refuse("it reads " + table.identifier().unquotedString());
    }
  }

  static void refuse(String why) {
    throw new TrajprivRefusal("refused: " + why + ". Analysts read the published zone ("
        + String.join(", ", DATABASES) + ") only.");
  }

  /** The refusal clients see (an unchecked exception: a check rule may throw no other). */
  public static class TrajprivRefusal extends RuntimeException {
    public TrajprivRefusal(String message) {
      super(message);
    }
  }
}
