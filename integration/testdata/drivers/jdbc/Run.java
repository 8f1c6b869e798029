// Run is the pgjdbc runner of the integration package's differential harness
// (differential_driver_test.go), compiled by the test with javac against
// Debian's /usr/share/java/postgresql.jar. It reads commands, one JSON array
// of strings a line, from stdin and answers each with one JSON line:
//
//   ["open", jdbcURL, mode]  connects; mode is prepared or fetch
//   ["stmt", sql]            runs sql and prints what JDBC exposes of it
//   ["close"]                ends the connection
//
// Mode prepared runs every statement as a PreparedStatement (the URL's
// prepareThreshold decides when pgjdbc names it on the server: from the 5th
// execution by default, from the first with prepareThreshold=1). Mode fetch
// runs every statement as a Statement with setFetchSize(1): pgjdbc then reads
// rows with Execute and a row limit of 1, but only with autocommit off,
// which would change what the script's statements mean. So fetch mode turns
// autocommit off only where that changes nothing: inside a transaction the
// script opened (pgjdbc sends no BEGIN of its own then), and for a single
// query (SELECT, WITH, VALUES, TABLE, SHOW) outside one, which then runs in
// a transaction of its own that is committed (rolled back after an error)
// right after it, as autocommit would have. Other statements outside a
// transaction run in autocommit mode.
//
// JDBC shows no command tag: a result lists each result set's fields and
// rows and each update count, in order. Fields are the RowDescription's
// name, type OID, typmod and format code (read from pgjdbc's Field through
// PgResultSetMetaData, which keeps them; see field below) and the type name
// and precision of ResultSetMetaData. Rows are getString of every column.
// Errors are the server's fields (PSQLException.getServerErrorMessage());
// the transaction status is pgjdbc's own (BaseConnection.getTransactionState).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import org.postgresql.core.BaseConnection;
import org.postgresql.core.Field;
import org.postgresql.core.TransactionState;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

public class Run {
  private Connection conn;
  private String mode = "";

  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    Run r = new Run();
    for (String line; (line = in.readLine()) != null; ) {
      String res;
      try {
        res = r.command(parseArray(line));
      } catch (Exception e) {
        res = "{\"err\":" + errJSON(e) + "}";
      }
      out.println(res);
      out.flush();
    }
    r.close();
  }

  private String command(List<String> cmd) throws Exception {
    switch (cmd.get(0)) {
      case "open":
        mode = cmd.get(2);
        conn = DriverManager.getConnection(cmd.get(1));
        return "{\"ok\":true}";
      case "stmt":
        return stmt(cmd.get(1));
      case "close":
        close();
        return "{\"ok\":true}";
      default:
        throw new IllegalArgumentException("unknown command " + cmd.get(0));
    }
  }

  private void close() {
    if (conn != null) {
      try {
        conn.close();
      } catch (SQLException e) {
        // The connection is gone either way.
      }
    }
    conn = null;
  }

  private String stmt(String sql) {
    List<String> fields = new ArrayList<>();
    List<String> rows = new ArrayList<>();
    List<String> counts = new ArrayList<>();
    String err = "null";
    try {
      if (mode.equals("fetch")) {
        fetch(sql, fields, rows, counts);
      } else {
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
          collect(ps, ps.execute(), fields, rows, counts);
        }
      }
    } catch (Exception e) {
      err = errJSON(e);
    }
    return "{\"tag\":" + quote(String.join("; ", counts)) + ",\"fields\":" + array(fields)
        + ",\"rows\":" + array(rows) + ",\"err\":" + err + ",\"tx\":" + quote(tx()) + "}";
  }

  // fetch runs sql as a Statement with fetch size 1; see the comment at the top.
  private void fetch(String sql, List<String> fields, List<String> rows, List<String> counts) throws SQLException {
    boolean idle = state() == TransactionState.IDLE;
    boolean own = idle && isQuery(sql);
    if (!idle || own) {
      conn.setAutoCommit(false);
    }
    try (Statement st = conn.createStatement()) {
      st.setFetchSize(1);
      collect(st, st.execute(sql), fields, rows, counts);
    } finally {
      if (own && state() == TransactionState.OPEN) {
        conn.commit();
      } else if (own && state() == TransactionState.FAILED) {
        conn.rollback();
      }
      // Autocommit goes back on once no transaction is open: setAutoCommit
      // commits an open one.
      if (state() == TransactionState.IDLE) {
        conn.setAutoCommit(true);
      }
    }
  }

  private static boolean isQuery(String sql) {
    String s = sql.trim().toUpperCase(Locale.ROOT);
    if (s.contains(";")) {
      return false;
    }
    for (String k : new String[] {"SELECT", "WITH", "VALUES", "TABLE", "SHOW"}) {
      if (s.startsWith(k)) {
        return true;
      }
    }
    return false;
  }

  private TransactionState state() {
    try {
      return conn.unwrap(BaseConnection.class).getTransactionState();
    } catch (SQLException e) {
      return null;
    }
  }

  private String tx() {
    TransactionState s = conn == null ? null : state();
    if (s == null) {
      return "";
    }
    switch (s) {
      case IDLE:
        return "I";
      case OPEN:
        return "T";
      case FAILED:
        return "E";
      default:
        return "?";
    }
  }

  private static void collect(Statement st, boolean isResult, List<String> fields, List<String> rows, List<String> counts)
      throws SQLException {
    for (;;) {
      if (isResult) {
        try (ResultSet rs = st.getResultSet()) {
          ResultSetMetaData md = rs.getMetaData();
          int n = md.getColumnCount();
          for (int i = 1; i <= n; i++) {
            fields.add(field(md, i));
          }
          counts.add("rows");
          while (rs.next()) {
            StringBuilder b = new StringBuilder();
            for (int i = 1; i <= n; i++) {
              String v = rs.getString(i);
              b.append(i > 1 ? "|" : "").append(v == null ? "NULL" : quote(v));
            }
            rows.add(b.toString());
          }
        }
      } else {
        int c = st.getUpdateCount();
        if (c == -1) {
          return;
        }
        counts.add("count " + c);
      }
      isResult = st.getMoreResults();
    }
  }

  // field describes column i. pgjdbc keeps the RowDescription field (type
  // OID, typmod, format) in PgResultSetMetaData.getField, which is
  // protected: read through reflection, falling back to what
  // ResultSetMetaData shows.
  private static String field(ResultSetMetaData md, int i) throws SQLException {
    String s = md.getColumnLabel(i) + ":" + md.getColumnTypeName(i) + ":" + md.getPrecision(i) + ":" + md.getScale(i);
    try {
      Method m = md.getClass().getDeclaredMethod("getField", int.class);
      m.setAccessible(true);
      Field f = (Field) m.invoke(md, i);
      s += ":" + f.getOID() + ":" + f.getMod() + ":" + f.getFormat();
    } catch (ReflectiveOperationException | RuntimeException e) {
      s += ":?";
    }
    return s;
  }

  private static String errJSON(Exception e) {
    if (e instanceof PSQLException) {
      ServerErrorMessage m = ((PSQLException) e).getServerErrorMessage();
      if (m != null) {
        return "{\"severity\":" + quote(m.getSeverity()) + ",\"code\":" + quote(m.getSQLState())
            + ",\"message\":" + quote(m.getMessage()) + ",\"detail\":" + quote(m.getDetail())
            + ",\"hint\":" + quote(m.getHint()) + "}";
      }
    }
    String state = e instanceof SQLException ? ((SQLException) e).getSQLState() : null;
    return "{\"other\":" + quote(e.getClass().getSimpleName() + " " + state + ": " + e.getMessage()) + "}";
  }

  private static String array(List<String> xs) {
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < xs.size(); i++) {
      b.append(i > 0 ? "," : "").append(quote(xs.get(i)));
    }
    return b.append(']').toString();
  }

  private static String quote(String s) {
    if (s == null) {
      return "\"\"";
    }
    StringBuilder b = new StringBuilder("\"");
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append('"').toString();
  }

  // parseArray reads a JSON array of strings, all that the harness sends.
  static List<String> parseArray(String s) {
    List<String> out = new ArrayList<>();
    int i = skip(s, 0);
    if (i >= s.length() || s.charAt(i) != '[') {
      throw new IllegalArgumentException("want a JSON array: " + s);
    }
    i = skip(s, i + 1);
    while (i < s.length() && s.charAt(i) != ']') {
      if (s.charAt(i) != '"') {
        throw new IllegalArgumentException("want a string at " + i + ": " + s);
      }
      StringBuilder b = new StringBuilder();
      for (i++; s.charAt(i) != '"'; i++) {
        char c = s.charAt(i);
        if (c != '\\') {
          b.append(c);
          continue;
        }
        c = s.charAt(++i);
        switch (c) {
          case 'n': b.append('\n'); break;
          case 't': b.append('\t'); break;
          case 'r': b.append('\r'); break;
          case 'b': b.append('\b'); break;
          case 'f': b.append('\f'); break;
          case 'u': b.append((char) Integer.parseInt(s.substring(i + 1, i + 5), 16)); i += 4; break;
          default: b.append(c);
        }
      }
      out.add(b.toString());
      i = skip(s, i + 1);
      if (i < s.length() && s.charAt(i) == ',') {
        i = skip(s, i + 1);
      }
    }
    return out;
  }

  private static int skip(String s, int i) {
    while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
      i++;
    }
    return i;
  }
}
