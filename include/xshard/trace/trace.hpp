// xshard/trace/trace.hpp - trace_me scopes and a Chrome-trace / Perfetto JSON writer.
//
// Example (compiled in tests/compile/doc_trace.cpp):
//   xshard::tracer::instance().start();
//   {
//     xshard::trace_device_scope d(3);              // this thread works for device 3
//     xshard::trace_me t("layer3/forward");         // one complete event ("ph":"X")
//     for (int i = 0; i < n; ++i) {
//       xshard::trace_me it("scan/iter", {{"i", i}});  // args at construction ...
//       it.arg("rows", rows);                          // ... or later, while open
//     }
//   }
//   xshard::tracer::instance().write_chrome_json("trace.json");  // chrome://tracing, ui.perfetto.dev
//
// The collector is one process-wide object, `tracer::instance()`, created on
// first use and never destroyed (so threads that outlive static destruction
// can still trace). Every event carries:
//   name    the scope's name (copied when the scope opens)
//   ts/dur  begin and duration, written in microseconds with three decimals
//           (exact nanoseconds), ts counted from the tracer's creation
//   pid     the device: the innermost `trace_device_scope` of the thread that
//           opened the scope (thread-local), 0 without one
//   tid     the thread: 1, 2, 3, ... in the order threads first traced, never
//           reused; `set_trace_thread_name()` names it in the viewer
//   args    int64 / double / bool / string values
// Metadata events ("ph":"M") name every device seen "device <id>" (sorted by
// id) and every thread "thread <tid>" unless it was named.
//
// Rules:
//   * An event is recorded when tracing is on both when its scope opens and
//     when it closes; a scope that closes after stop() is dropped.
//   * Disabled cost: one relaxed atomic load and a branch when the scope opens
//     and a test of a member when it closes; no clock read, allocation or lock.
//     (With `{{"k", v}}` args the caller also builds that small array of views
//     on the stack; `t.arg()` is a branch when off.)
//   * Enabled: the name and args go to a thread-local stack of open scopes; at
//     close the complete event is appended to the thread's own buffer under
//     that buffer's mutex, which only the writer ever contends for. Buffers are
//     owned by the collector (shared_ptr), so a thread's events outlive it.
//   * Scopes on one thread nest: a child's [ts, ts + dur] lies inside its
//     parent's (one monotonic clock, read after opening and before closing).
//   * clear() drops recorded events of every thread (and forgets threads that
//     have exited); scopes open at the time are recorded when they close.
//   * write_chrome_json() may run while other threads trace: it copies each
//     buffer under its lock and sorts by (device, tid, ts, longer first).
//
// Environment: XSHARD_TRACE=path.json starts tracing when the process first
// touches the tracer (the first trace_me scope opened or any tracer::instance()
// call; nothing is recorded before that, so this is the same as starting at
// program start-up) and writes the trace to that path at normal process exit
// (return from main or std::exit; not on abort or _exit). A write error is
// reported on stderr. Relative paths resolve against the working directory at
// exit. The variable is read on first use, not by a static initialiser: a
// translation unit that includes this header and traces nothing compiles no
// code of it.
#pragma once

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../core/error.hpp"  // xshard::error when a trace file cannot be written

namespace xshard {

/// A value attached to an event (`"args"` in the JSON).
using trace_value = std::variant<std::int64_t, double, bool, std::string>;

/// One named argument of an event.
struct trace_arg {
  std::string key;
  trace_value value;
  friend bool operator==(const trace_arg&, const trace_arg&) = default;
};

/// One complete event as recorded (see tracer::events()).
struct trace_event {
  std::string name;
  std::int64_t ts_ns = 0;   // begin, nanoseconds since the tracer was created
  std::int64_t dur_ns = 0;  // end - begin, nanoseconds
  int device = 0;           // "pid"
  std::uint32_t tid = 0;    // "tid"
  std::vector<trace_arg> args;
};

/// A non-owning argument, cheap to build when tracing is off: `{"i", 3}`,
/// `{"scale", 0.5}`, `{"ok", true}`, `{"mode", "fast"}` (integers become
/// int64; unsigned values above INT64_MAX become double).
class trace_arg_view {
 public:
  template <class T>
  requires(std::is_arithmetic_v<T> ||
           std::is_convertible_v<const T&, std::string_view>) constexpr trace_arg_view(std::string_view key,
                                                                                       const T& value) noexcept
      : key_(key), value_(convert(value)) {}

  template <class = void>  // a template: a TU that never traces instantiates none of this
  trace_arg to_arg() const {
    // A switch on the index rather than std::visit: the same result, and
    // much less for every including TU to instantiate.
    switch (value_.index()) {
      case 0:
        return trace_arg{std::string(key_), trace_value(std::in_place_index<0>, *std::get_if<0>(&value_))};
      case 1:
        return trace_arg{std::string(key_), trace_value(std::in_place_index<1>, *std::get_if<1>(&value_))};
      case 2:
        return trace_arg{std::string(key_), trace_value(std::in_place_index<2>, *std::get_if<2>(&value_))};
      default:
        return trace_arg{std::string(key_), trace_value(std::in_place_index<3>, *std::get_if<3>(&value_))};
    }
  }

 private:
  using view = std::variant<std::int64_t, double, bool, std::string_view>;

  template <class T>
  static constexpr view convert(const T& value) noexcept {
    if constexpr (std::is_same_v<T, bool>) {
      return view(std::in_place_type<bool>, value);
    } else if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(std::int64_t)) {
        if (value > static_cast<T>(INT64_MAX)) return view(std::in_place_type<double>, static_cast<double>(value));
      }
      return view(std::in_place_type<std::int64_t>, static_cast<std::int64_t>(value));
    } else if constexpr (std::is_floating_point_v<T>) {
      return view(std::in_place_type<double>, static_cast<double>(value));
    } else {
      return view(std::in_place_type<std::string_view>, std::string_view(value));
    }
  }

  std::string_view key_;
  view value_;
};

namespace detail {

/// The switch every scope reads (constant-initialised: no guard, no call):
/// trace_off, trace_on, or trace_unread before the tracer has been created
/// (and XSHARD_TRACE read). Scopes test `!= trace_off`, so the disabled cost
/// stays one relaxed load and a branch.
enum trace_mode_value : signed char { trace_off = 0, trace_on = 1, trace_unread = 2 };
inline std::atomic<signed char> trace_mode{trace_unread};

inline bool trace_recording() noexcept { return trace_mode.load(std::memory_order_relaxed) == trace_on; }

/// The device of the calling thread (see trace_device_scope).
inline thread_local int trace_device = 0;

inline std::int64_t trace_now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// One thread's recorded events; shared by the thread and the collector.
struct trace_buffer {
  std::mutex mu;  // taken by the owner per event and by the collector to read or clear
  std::vector<trace_event> events;
  std::uint32_t tid = 0;
  std::string thread_name;  // empty: "thread <tid>"
};

struct trace_open_scope {
  std::string name;
  std::int64_t begin_ns = 0;
  int device = 0;
  bool done = false;
  std::vector<trace_arg> args;
};

/// Thread-local: the buffer (registered on first use) and the open scopes.
struct trace_thread_state {
  std::shared_ptr<trace_buffer> buffer;
  std::vector<trace_open_scope> open;  // slots [0, depth) are in use or done-but-covered
  std::size_t depth = 0;
};

/// Set while a fiber runs (a thread_mesh worker running several devices):
/// that fiber's state, so each device keeps its own open scopes and buffer.
inline thread_local trace_thread_state* trace_fiber_state = nullptr;

template <class = void>
trace_thread_state& trace_local() {
  static thread_local trace_thread_state state;
  return trace_fiber_state ? *trace_fiber_state : state;
}

// The run-time parts are templates (of a defaulted, unused parameter): a
// translation unit that includes this header but never traces instantiates
// none of them (issue: compile time is a feature).
template <class = void>
std::shared_ptr<trace_buffer>& trace_local_buffer();
template <class = void>
void trace_write_at_exit() noexcept;
template <class = void>
void trace_register_exit_writer();
template <class = void>
bool trace_to_file_at_exit(const char* path);

// JSON text -----------------------------------------------------------------

/// Length of the valid UTF-8 sequence at s[i] (a byte >= 0x80), or 0.
constexpr std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no UTF-16 surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

/// Appends s as a JSON string: quotes, backslashes and control characters
/// escaped; valid UTF-8 kept; each byte of invalid UTF-8 becomes U+FFFD.
template <class = void>
void append_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_sequence_length(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xF];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

template <class = void>
void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

/// Nanoseconds as microseconds with exactly three decimals: 1234567 -> "1234.567".
template <class = void>
void append_us(std::string& out, std::int64_t ns) {
  std::uint64_t u = ns < 0 ? 0 - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
  if (ns < 0) out += '-';
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, u / 1000);
  out.append(buf, r.ptr);
  const auto frac = static_cast<unsigned>(u % 1000);
  out += '.';
  out += static_cast<char>('0' + frac / 100);
  out += static_cast<char>('0' + frac / 10 % 10);
  out += static_cast<char>('0' + frac % 10);
}

/// A JSON value; non-finite doubles (not JSON numbers) become the strings
/// "NaN", "Infinity", "-Infinity".
template <class = void>
void append_json_value(std::string& out, const trace_value& value) {
  if (const bool* b = std::get_if<bool>(&value)) {
    out += *b ? "true" : "false";
  } else if (const std::int64_t* i = std::get_if<std::int64_t>(&value)) {
    append_int(out, *i);
  } else if (const double* d = std::get_if<double>(&value)) {
    const double v = *d;
    if (std::isnan(v)) {
      out += "\"NaN\"";
    } else if (std::isinf(v)) {
      out += v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
    } else {
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, v);
      out.append(buf, r.ptr);
    }
  } else if (const std::string* s = std::get_if<std::string>(&value)) {
    append_json_string(out, *s);
  } else {
    throw std::bad_variant_access();  // valueless, as std::visit would
  }
}

}  // namespace detail

/// The process-wide collector, `tracer` (basic_tracer<>: a template only so
/// that a TU that never traces instantiates none of it). All members are
/// thread-safe.
template <class Unused = void>
class basic_tracer {
 public:
  /// The one collector (created on first use, never destroyed).
  static basic_tracer& instance() {
    static basic_tracer* const the = new basic_tracer();  // immortal: threads may trace during static destruction
    return *the;
  }

  basic_tracer(const basic_tracer&) = delete;
  basic_tracer& operator=(const basic_tracer&) = delete;

  /// Scopes opened from now on are recorded.
  void start() noexcept { detail::trace_mode.store(detail::trace_on, std::memory_order_relaxed); }
  /// Scopes closing from now on are dropped; recorded events are kept.
  void stop() noexcept { detail::trace_mode.store(detail::trace_off, std::memory_order_relaxed); }
  bool enabled() const noexcept { return detail::trace_recording(); }

  /// Drops every recorded event (does not stop tracing).
  void clear() {
    std::lock_guard lock(mu_);
    for (const auto& buffer : buffers_) {
      std::lock_guard buffer_lock(buffer->mu);
      buffer->events.clear();  // keeps its capacity: a warm buffer for the next run
    }
    // A buffer only the collector holds belongs to a thread that has exited.
    std::erase_if(buffers_, [](const std::shared_ptr<detail::trace_buffer>& b) { return b.use_count() == 1; });
  }

  /// The recorded events of every thread, sorted by (device, tid, ts, longer first).
  std::vector<trace_event> events() const { return snapshot().events; }

  /// Chrome trace event JSON: {"traceEvents": [...], "displayTimeUnit": "ms"}.
  void write_chrome_json(std::ostream& os) const {
    const std::string text = chrome_json();
    os.write(text.data(), static_cast<std::streamsize>(text.size()));
  }

  /// The same into a file (replaced). Throws xshard::error if it cannot be written.
  void write_chrome_json(const std::string& path) const {
    const std::string text = chrome_json();
    std::FILE* file = std::fopen(path.c_str(), "wb");
    if (file == nullptr) throw error("xshard: cannot open trace file \"" + path + "\" for writing");
    const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
    if (std::fclose(file) != 0 || !written) throw error("xshard: cannot write trace file \"" + path + "\"");
  }

  /// The JSON text write_chrome_json() writes.
  std::string chrome_json() const {
    const trace_snapshot snap = snapshot();
    std::string out;
    out.reserve(256 + snap.events.size() * 128);
    out += "{\"traceEvents\":[";
    bool first = true;
    const auto next = [&] {
      out += first ? "\n" : ",\n";
      first = false;
    };
    // Metadata: each device seen is a process, each (device, thread) a thread.
    // The pairs sort as device * 2^32 + tid (tid < 2^32): by device, then tid.
    std::vector<std::int64_t> threads;
    threads.reserve(snap.events.size());
    for (const trace_event& e : snap.events) threads.push_back(e.device * (std::int64_t{1} << 32) + e.tid);
    std::sort(threads.begin(), threads.end());
    threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
    const auto device_of = [](std::int64_t key) { return static_cast<int>(key >> 32); };
    const auto tid_of = [](std::int64_t key) { return static_cast<std::uint32_t>(key & 0xFFFFFFFF); };
    const auto metadata = [&](std::string_view name, int pid, std::uint32_t tid, std::string_view arg) {
      next();
      out += "{\"name\":";
      detail::append_json_string(out, name);
      out += ",\"ph\":\"M\",\"pid\":";
      detail::append_int(out, pid);
      out += ",\"tid\":";
      detail::append_int(out, tid);
      out += ",\"args\":{";
      out += arg;
      out += "}}";
    };
    for (std::size_t i = 0; i < threads.size(); ++i) {
      const int d = device_of(threads[i]);
      if (i > 0 && device_of(threads[i - 1]) == d) continue;
      std::string arg = "\"name\":";
      detail::append_json_string(arg, "device " + std::to_string(d));
      metadata("process_name", d, 0, arg);
      arg = "\"sort_index\":";
      detail::append_int(arg, d);
      metadata("process_sort_index", d, 0, arg);
    }
    for (const std::int64_t key : threads) {
      const int d = device_of(key);
      const std::uint32_t tid = tid_of(key);
      const std::string* named = nullptr;
      for (const auto& [t, name] : snap.thread_names)
        if (t == tid) named = &name;
      std::string arg = "\"name\":";
      detail::append_json_string(arg, named != nullptr ? *named : "thread " + std::to_string(tid));
      metadata("thread_name", d, tid, arg);
      arg = "\"sort_index\":";
      detail::append_int(arg, tid);
      metadata("thread_sort_index", d, tid, arg);
    }
    for (const trace_event& e : snap.events) {
      next();
      out += "{\"name\":";
      detail::append_json_string(out, e.name);
      out += ",\"cat\":\"xshard\",\"ph\":\"X\",\"ts\":";
      detail::append_us(out, e.ts_ns);
      out += ",\"dur\":";
      detail::append_us(out, e.dur_ns);
      out += ",\"pid\":";
      detail::append_int(out, e.device);
      out += ",\"tid\":";
      detail::append_int(out, e.tid);
      out += ",\"args\":{";
      for (std::size_t i = 0; i < e.args.size(); ++i) {
        if (i) out += ',';
        detail::append_json_string(out, e.args[i].key);
        out += ':';
        detail::append_json_value(out, e.args[i].value);
      }
      out += "}}";
    }
    out += "\n],\"displayTimeUnit\":\"ms\"}\n";
    return out;
  }

 private:
  template <class>
  friend std::shared_ptr<detail::trace_buffer>& detail::trace_local_buffer();
  template <class>
  friend void detail::trace_write_at_exit() noexcept;
  template <class>
  friend bool detail::trace_to_file_at_exit(const char* path);

  struct trace_snapshot {
    std::vector<trace_event> events;
    std::vector<std::pair<std::uint32_t, std::string>> thread_names;  // the named threads
  };

  /// Reads XSHARD_TRACE (see the top of this file): tracing starts with the
  /// tracer when it names a file; otherwise the mode leaves trace_unread.
  basic_tracer() : epoch_ns_(detail::trace_now_ns()) {
    const char* path = std::getenv("XSHARD_TRACE");
    if (path != nullptr && *path != '\0') {
      write_at_exit(path);
    } else {
      signed char unread = detail::trace_unread;
      detail::trace_mode.compare_exchange_strong(unread, detail::trace_off, std::memory_order_relaxed);
    }
  }

  std::shared_ptr<detail::trace_buffer> register_thread() {
    auto buffer = std::make_shared<detail::trace_buffer>();
    buffer->events.reserve(256);
    std::lock_guard lock(mu_);
    buffer->tid = next_tid_++;
    buffers_.push_back(buffer);
    return buffer;
  }

  trace_snapshot snapshot() const {
    std::vector<std::shared_ptr<detail::trace_buffer>> buffers;
    {
      std::lock_guard lock(mu_);
      buffers = buffers_;
    }
    trace_snapshot snap;
    for (const auto& buffer : buffers) {
      std::lock_guard lock(buffer->mu);
      for (const trace_event& e : buffer->events) snap.events.push_back(e);
      if (!buffer->thread_name.empty()) snap.thread_names.emplace_back(buffer->tid, buffer->thread_name);
    }
    for (trace_event& e : snap.events) e.ts_ns -= epoch_ns_;
    // Sorted through their indices, ties broken by the index: the order of
    // a stable sort, without instantiating one over trace_event.
    const std::vector<trace_event>& ev = snap.events;
    std::vector<std::size_t> order(ev.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&ev](std::size_t x, std::size_t y) {
      const trace_event &a = ev[x], &b = ev[y];
      if (a.device != b.device) return a.device < b.device;
      if (a.tid != b.tid) return a.tid < b.tid;
      if (a.ts_ns != b.ts_ns) return a.ts_ns < b.ts_ns;
      if (a.dur_ns != b.dur_ns) return a.dur_ns > b.dur_ns;
      return x < y;
    });
    std::vector<trace_event> sorted;
    sorted.reserve(order.size());
    for (const std::size_t i : order) sorted.push_back(std::move(snap.events[i]));
    snap.events = std::move(sorted);
    return snap;
  }

  /// Starts tracing and arranges for the trace to be written to `path` at
  /// normal exit (XSHARD_TRACE and detail::trace_to_file_at_exit).
  void write_at_exit(const char* path) {
    {
      std::lock_guard lock(mu_);
      exit_path_ = path;
    }
    detail::trace_register_exit_writer();
    start();
  }

  mutable std::mutex mu_;  // guards buffers_ and next_tid_
  std::vector<std::shared_ptr<detail::trace_buffer>> buffers_;
  std::uint32_t next_tid_ = 1;
  std::int64_t epoch_ns_;
  std::string exit_path_;  // XSHARD_TRACE
};

using tracer = basic_tracer<>;

namespace detail {

/// The calling thread's buffer, registered with the collector on first use.
template <class>
std::shared_ptr<trace_buffer>& trace_local_buffer() {
  trace_thread_state& state = trace_local();
  if (!state.buffer) state.buffer = tracer::instance().register_thread();
  return state.buffer;
}

}  // namespace detail

/// Names the calling thread in the trace ("thread <tid>" otherwise).
template <class = void>
void set_trace_thread_name(std::string_view name) {
  const std::shared_ptr<detail::trace_buffer>& buffer = detail::trace_local_buffer();
  std::lock_guard lock(buffer->mu);
  buffer->thread_name.assign(name);
}

/// The device the calling thread's scopes are attributed to (0 by default).
inline int current_trace_device() noexcept { return detail::trace_device; }

/// RAII: scopes opened by this thread while it lives belong to `device`;
/// restores the previous device on exit. Nests.
class trace_device_scope {
 public:
  explicit trace_device_scope(int device) noexcept : previous_(detail::trace_device) { detail::trace_device = device; }
  ~trace_device_scope() { detail::trace_device = previous_; }
  trace_device_scope(const trace_device_scope&) = delete;
  trace_device_scope& operator=(const trace_device_scope&) = delete;

 private:
  int previous_;
};

/// RAII: one complete event from construction to destruction (when tracing
/// is on at both). Give it a name: `xshard::trace_me t("x");` — an unnamed
/// temporary would close at once (the constructor is [[nodiscard]]).
/// Not copyable or movable. Never throws (if recording fails for lack of
/// memory, the event is silently dropped).
template <class Unused = void>
class basic_trace_me {
 public:
  [[nodiscard]] explicit basic_trace_me(std::string_view name) noexcept {
    if (detail::trace_mode.load(std::memory_order_relaxed) != detail::trace_off) [[unlikely]]
      begin(name, {});
  }
  /// With args: `xshard::trace_me t("scan/iter", {{"i", i}, {"mode", "fast"}});`
  [[nodiscard]] basic_trace_me(std::string_view name, std::initializer_list<trace_arg_view> args) noexcept {
    if (detail::trace_mode.load(std::memory_order_relaxed) != detail::trace_off) [[unlikely]]
      begin(name, args);
  }
  ~basic_trace_me() {
    if (slot_ >= 0) [[unlikely]]
      end();
  }
  basic_trace_me(const basic_trace_me&) = delete;
  basic_trace_me& operator=(const basic_trace_me&) = delete;

  /// Adds an arg to the open event (nothing when this scope is not recording).
  template <class T>
  basic_trace_me& arg(std::string_view key, const T& value) noexcept {
    if (slot_ >= 0) [[unlikely]]
      add(trace_arg_view(key, value));
    return *this;
  }

  /// True if this scope is being recorded.
  bool recording() const noexcept { return slot_ >= 0; }

 private:
  void begin(std::string_view name, std::initializer_list<trace_arg_view> args) noexcept {
    try {
      if (detail::trace_mode.load(std::memory_order_relaxed) == detail::trace_unread) tracer::instance();
      if (!detail::trace_recording()) return;
      detail::trace_local_buffer();
      detail::trace_thread_state& state = detail::trace_local();
      if (state.depth == state.open.size()) state.open.emplace_back();
      detail::trace_open_scope& scope = state.open[state.depth];
      scope.name.assign(name);
      scope.device = detail::trace_device;
      scope.done = false;
      scope.args.clear();
      for (const trace_arg_view& a : args) scope.args.push_back(a.to_arg());
      slot_ = static_cast<std::ptrdiff_t>(state.depth++);
      scope.begin_ns = detail::trace_now_ns();  // last: the event excludes this bookkeeping
    } catch (...) {
      slot_ = -1;
    }
  }

  void add(const trace_arg_view& a) noexcept {
    try {
      detail::trace_local().open[static_cast<std::size_t>(slot_)].args.push_back(a.to_arg());
    } catch (...) {
    }
  }

  void end() noexcept {
    const std::int64_t end_ns = detail::trace_now_ns();  // first: the event excludes this bookkeeping
    detail::trace_thread_state& state = detail::trace_local();
    detail::trace_open_scope& scope = state.open[static_cast<std::size_t>(slot_)];
    if (detail::trace_recording()) {
      try {
        detail::trace_buffer& buffer = *state.buffer;
        trace_event event{std::move(scope.name), scope.begin_ns, end_ns - scope.begin_ns,
                          scope.device,          buffer.tid,     std::move(scope.args)};
        std::lock_guard lock(buffer.mu);
        buffer.events.push_back(std::move(event));
      } catch (...) {
      }
    }
    scope.done = true;
    while (state.depth > 0 && state.open[state.depth - 1].done) --state.depth;
    slot_ = -1;
  }

  std::ptrdiff_t slot_ = -1;  // index in the thread's open scopes, -1 when not recording
};

/// A trace scope (basic_trace_me<>: a template only so that a TU that never
/// traces instantiates none of it).
using trace_me = basic_trace_me<>;

// XSHARD_TRACE ------------------------------------------------------------------

namespace detail {

/// The atexit handler of XSHARD_TRACE: stop and write the file.
template <class>
void trace_write_at_exit() noexcept {
  tracer& t = tracer::instance();
  t.stop();
  std::string path;
  {
    std::lock_guard lock(t.mu_);
    path = t.exit_path_;
  }
  try {
    t.write_chrome_json(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xshard: XSHARD_TRACE: %s\n", e.what());
  }
}

/// Starts tracing and arranges for the trace to be written to `path` at exit
/// (what XSHARD_TRACE=path does at start-up). A null or empty path does nothing.
/// Returns whether tracing was started.
template <class>
bool trace_to_file_at_exit(const char* path) {
  if (path == nullptr || *path == '\0') return false;
  tracer::instance().write_at_exit(path);
  return true;
}

/// Registers trace_write_at_exit with std::atexit, once per process.
template <class>
void trace_register_exit_writer() {
  static std::atomic<bool> registered{false};
  if (!registered.exchange(true)) std::atexit(+[] { trace_write_at_exit(); });
}

}  // namespace detail

}  // namespace xshard
