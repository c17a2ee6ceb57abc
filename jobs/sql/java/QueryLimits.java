package trajpriv;

import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd;
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart;

/**
 * The per-query time limit of the analysts' endpoints, the same for Thrift and Connect: a
 * query is one root SQL execution (spark.sql.execution.root.id on its jobs); once it has run
 * longer than spark.trajpriv.serve.queryTimeoutSeconds (from `serve.query_timeout_s`), its
 * running jobs and any job it starts later are cancelled with a line that names the setting.
 * Read from the driver's SparkConf when the endpoints start, so a session's SET cannot change
 * it.
 */
public class QueryLimits extends SparkListener {

  static final String TIMEOUT_CONF = "spark.trajpriv.serve.queryTimeoutSeconds";
  static final String SETTING = "serve.query_timeout_s";
  static final String ROOT_ID = "spark.sql.execution.root.id";
  static final String EXECUTION_ID = "spark.sql.execution.id";

  private final SparkContext sc;
  private final long limitMillis;
  private final Map<String, Long> started = new ConcurrentHashMap<>();
  private final Map<String, Set<Integer>> running = new ConcurrentHashMap<>();
  private final Set<String> timedOut = ConcurrentHashMap.newKeySet();

  QueryLimits(SparkContext sc, long limitSeconds) {
    this.sc = sc;
    this.limitMillis = limitSeconds * 1000L;
  }

  static void start(SparkContext sc) {
    long seconds = Long.parseLong(sc.getConf().get(TIMEOUT_CONF, "900"));
    QueryLimits limits = new QueryLimits(sc, seconds);
    sc.addSparkListener(limits);
    ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "trajpriv-query-limits");
      t.setDaemon(true);
      return t;
    });
    timer.scheduleWithFixedDelay(limits::enforce, 1, 1, TimeUnit.SECONDS);
  }

  String reason() {
    return "timed out: the query ran longer than " + SETTING + " (" + limitMillis / 1000
        + " s), the endpoints' per-query limit";
  }

  static String query(Properties props) {
    if (props == null) {
      return null;
    }
    String root = props.getProperty(ROOT_ID);
    return root != null ? root : props.getProperty(EXECUTION_ID);
  }

  @Override
  public void onJobStart(SparkListenerJobStart event) {
    String q = query(event.properties());
    if (q == null) {
      return;
    }
    started.putIfAbsent(q, event.time());
    running.computeIfAbsent(q, k -> ConcurrentHashMap.newKeySet()).add(event.jobId());
    if (timedOut.contains(q)) {
      sc.cancelJob(event.jobId(), reason());
    }
  }

  @Override
  public void onJobEnd(SparkListenerJobEnd event) {
    running.values().forEach(jobs -> jobs.remove(event.jobId()));
  }

  @Override
  public void onOtherEvent(SparkListenerEvent event) {
    if (event instanceof SparkListenerSQLExecutionStart) {
      SparkListenerSQLExecutionStart start = (SparkListenerSQLExecutionStart) event;
      long id = start.executionId();
      long root = (Long) start.rootExecutionId().getOrElse(() -> id);
      if (root == id) {
        started.putIfAbsent(Long.toString(id), start.time());
      }
    } else if (event instanceof SparkListenerSQLExecutionEnd) {
      String id = Long.toString(((SparkListenerSQLExecutionEnd) event).executionId());
      started.remove(id);
      running.remove(id);
      timedOut.remove(id);
    }
  }

  /** Cancel the jobs of every query past its limit (the timer's thread, once a second). */
  void enforce() {
    long now = System.currentTimeMillis();
    started.forEach((q, t0) -> {
      if (now - t0 > limitMillis) {
        timedOut.add(q);
        Set<Integer> jobs = running.get(q);
        if (jobs != null) {
          for (Integer job : jobs) {
            sc.cancelJob(job, reason());
          }
          jobs.clear();
        }
      }
    });
  }
}
