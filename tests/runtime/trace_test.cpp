// Tracing: trace_me scopes, devices and threads, args, the Chrome-trace JSON
// (parsed back with a small strict JSON parser below), escaping, clear(),
// and XSHARD_TRACE's write at exit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>  // setenv
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>
#include <xshard/trace/trace.hpp>

namespace {

// A strict JSON parser (RFC 8259): returns nullptr-free trees or fails the test.
struct json;
using json_ptr = std::shared_ptr<json>;
struct json {
  std::variant<std::nullptr_t, bool, double, std::string, std::vector<json_ptr>, std::map<std::string, json_ptr>> v;
  std::string number_text;  // the literal, for numbers

  bool is_object() const { return std::holds_alternative<std::map<std::string, json_ptr>>(v); }
  bool is_array() const { return std::holds_alternative<std::vector<json_ptr>>(v); }
  bool is_number() const { return std::holds_alternative<double>(v); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  const std::map<std::string, json_ptr>& obj() const { return std::get<std::map<std::string, json_ptr>>(v); }
  const std::vector<json_ptr>& arr() const { return std::get<std::vector<json_ptr>>(v); }
  double num() const { return std::get<double>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  const json& at(const std::string& key) const {
    const auto it = obj().find(key);
    if (it == obj().end()) throw std::runtime_error("no key " + key);
    return *it->second;
  }
  bool has(const std::string& key) const { return obj().count(key) != 0; }
};

class json_parser {
 public:
  explicit json_parser(std::string_view text) : s_(text) {}

  json_ptr parse() {
    json_ptr value = parse_value();
    skip_ws();
    if (i_ != s_.size()) fail("trailing text");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON error at " + std::to_string(i_) + ": " + what);
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  char peek() {
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected ") + c);
    ++i_;
  }
  void literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) fail("bad literal");
    i_ += word.size();
  }

  json_ptr parse_value() {
    skip_ws();
    auto out = std::make_shared<json>();
    const char c = peek();
    if (c == '{') {
      ++i_;
      std::map<std::string, json_ptr> members;
      skip_ws();
      if (peek() == '}') {
        ++i_;
      } else {
        for (;;) {
          skip_ws();
          std::string key = parse_string();
          if (members.count(key)) fail("duplicate key " + key);
          skip_ws();
          expect(':');
          members[key] = parse_value();
          skip_ws();
          if (peek() == ',') {
            ++i_;
            continue;
          }
          expect('}');
          break;
        }
      }
      out->v = std::move(members);
    } else if (c == '[') {
      ++i_;
      std::vector<json_ptr> items;
      skip_ws();
      if (peek() == ']') {
        ++i_;
      } else {
        for (;;) {
          items.push_back(parse_value());
          skip_ws();
          if (peek() == ',') {
            ++i_;
            continue;
          }
          expect(']');
          break;
        }
      }
      out->v = std::move(items);
    } else if (c == '"') {
      out->v = parse_string();
    } else if (c == 't') {
      literal("true");
      out->v = true;
    } else if (c == 'f') {
      literal("false");
      out->v = false;
    } else if (c == 'n') {
      literal("null");
      out->v = nullptr;
    } else {
      const std::size_t start = i_;
      if (peek() == '-') ++i_;
      if (peek() == '0') {
        ++i_;
      } else if (peek() >= '1' && peek() <= '9') {
        while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      } else {
        fail("bad value");
      }
      if (i_ < s_.size() && s_[i_] == '.') {
        ++i_;
        if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("bad fraction");
        while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      }
      if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
        ++i_;
        if (peek() == '+' || peek() == '-') ++i_;
        if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("bad exponent");
        while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      }
      out->number_text = std::string(s_.substr(start, i_ - start));
      out->v = std::stod(out->number_text);
    }
    return out;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      const auto c = static_cast<unsigned char>(peek());
      ++i_;
      if (c == '"') return out;
      if (c < 0x20) fail("raw control character in string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      const char e = peek();
      ++i_;
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (i_ + 4 > s_.size()) fail("short \\u");
          const unsigned cp = static_cast<unsigned>(std::stoul(std::string(s_.substr(i_, 4)), nullptr, 16));
          i_ += 4;
          if (cp >= 0xD800 && cp <= 0xDFFF) fail("surrogates not expected here");
          append_utf8(out, cp);
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

json_ptr parse_json(const std::string& text) { return json_parser(text).parse(); }

xshard::tracer& tracer() { return xshard::tracer::instance(); }

// Every test starts and ends with tracing off and no events.
class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tracer().stop();
    tracer().clear();
  }
  void TearDown() override {
    tracer().stop();
    tracer().clear();
  }
};

std::vector<xshard::trace_event> named(const std::vector<xshard::trace_event>& all, std::string_view name) {
  std::vector<xshard::trace_event> out;
  for (const auto& e : all)
    if (e.name == name) out.push_back(e);
  return out;
}

bool inside(const xshard::trace_event& child, const xshard::trace_event& parent) {
  return child.ts_ns >= parent.ts_ns && child.ts_ns + child.dur_ns <= parent.ts_ns + parent.dur_ns;
}

// The "X" events of a parsed trace.
std::vector<const json*> complete_events(const json& root) {
  std::vector<const json*> out;
  for (const json_ptr& e : root.at("traceEvents").arr())
    if (e->at("ph").str() == "X") out.push_back(e.get());
  return out;
}

using TraceRecording = TraceTest;
using TraceArgs = TraceTest;
using TraceThreads = TraceTest;
using TraceJson = TraceTest;

TEST_F(TraceRecording, DisabledScopesRecordNothing) {
  EXPECT_FALSE(tracer().enabled());
  {
    xshard::trace_me t("off");
    EXPECT_FALSE(t.recording());
    t.arg("i", 1);
    xshard::trace_me u("off/args", {{"i", 2}});
    EXPECT_FALSE(u.recording());
  }
  EXPECT_TRUE(tracer().events().empty());
  const json_ptr root = parse_json(tracer().chrome_json());
  EXPECT_TRUE(root->at("traceEvents").arr().empty());
  EXPECT_EQ(root->at("displayTimeUnit").str(), "ms");
}

TEST_F(TraceRecording, RecordsOnlyWhileEnabled) {
  { xshard::trace_me t("before"); }
  tracer().start();
  EXPECT_TRUE(tracer().enabled());
  {
    xshard::trace_me t("during");
    EXPECT_TRUE(t.recording());
  }
  tracer().stop();
  { xshard::trace_me t("after"); }
  const auto events = tracer().events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "during");
  EXPECT_GE(events[0].dur_ns, 0);
  EXPECT_EQ(events[0].device, 0);
  EXPECT_GE(events[0].tid, 1u);
}

TEST_F(TraceRecording, ScopeClosingAfterStopIsDropped) {
  tracer().start();
  {
    xshard::trace_me t("open at stop");
    tracer().stop();
  }
  {
    xshard::trace_me t("opened while off");
    tracer().start();
    EXPECT_FALSE(t.recording());
  }
  EXPECT_TRUE(tracer().events().empty());
}

TEST_F(TraceRecording, NestedScopesNestAndSiblingsAreOrdered) {
  tracer().start();
  {
    xshard::trace_me outer("outer");
    for (int i = 0; i < 3; ++i) {
      xshard::trace_me mid("mid", {{"i", i}});
      xshard::trace_me inner("inner");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  tracer().stop();
  const auto events = tracer().events();
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(events[0].name, "outer");  // parent first: sorted by ts, longer first
  const auto mids = named(events, "mid");
  const auto inners = named(events, "inner");
  ASSERT_EQ(mids.size(), 3u);
  ASSERT_EQ(inners.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(inside(mids[i], events[0]));
    EXPECT_TRUE(inside(inners[i], mids[i]));
    EXPECT_EQ(inners[i].tid, events[0].tid);
    EXPECT_GE(inners[i].dur_ns, 50'000);
    ASSERT_EQ(mids[i].args.size(), 1u);
    EXPECT_EQ(mids[i].args[0], (xshard::trace_arg{"i", std::int64_t{i}}));
    if (i > 0) {
      EXPECT_GE(mids[i].ts_ns, mids[i - 1].ts_ns + mids[i - 1].dur_ns);  // siblings do not overlap
    }
  }
  // The same nesting survives the JSON's microseconds (three exact decimals).
  const json_ptr root = parse_json(tracer().chrome_json());
  const auto xs = complete_events(*root);
  ASSERT_EQ(xs.size(), 7u);
  const json& outer = *xs[0];
  EXPECT_EQ(outer.at("name").str(), "outer");
  for (const json* e : xs) {
    EXPECT_GE(e->at("ts").num(), outer.at("ts").num());
    EXPECT_LE(e->at("ts").num() + e->at("dur").num(), outer.at("ts").num() + outer.at("dur").num() + 1e-6);
  }
}

TEST_F(TraceRecording, OutOfOrderScopesStillRecord) {
  tracer().start();
  auto a = std::make_unique<xshard::trace_me>("a");
  auto b = std::make_unique<xshard::trace_me>("b");
  a.reset();  // closes before b
  { xshard::trace_me c("c"); }
  b.reset();
  { xshard::trace_me d("d"); }
  tracer().stop();
  std::set<std::string> names;
  for (const auto& e : tracer().events()) names.insert(e.name);
  EXPECT_EQ(names, (std::set<std::string>{"a", "b", "c", "d"}));
}

TEST_F(TraceRecording, ClearDropsEventsButKeepsTracing) {
  tracer().start();
  { xshard::trace_me t("old"); }
  xshard::trace_me open("open across clear");
  tracer().clear();
  EXPECT_TRUE(tracer().events().empty());
  EXPECT_TRUE(tracer().enabled());
  { xshard::trace_me t("new"); }
  const auto events = tracer().events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "new");
}

TEST_F(TraceArgs, InitializerListAndArgMethod) {
  tracer().start();
  {
    const std::string mode = "fast";
    xshard::trace_me t("step", {{"i", 3}, {"scale", 0.5}, {"ok", true}, {"mode", mode}, {"lit", "x"}});
    t.arg("rows", std::size_t{7}).arg("neg", -2).arg("big", ~std::uint64_t{0});
  }
  tracer().stop();
  const auto events = tracer().events();
  ASSERT_EQ(events.size(), 1u);
  const std::vector<xshard::trace_arg> expected{{"i", std::int64_t{3}},
                                                {"scale", 0.5},
                                                {"ok", true},
                                                {"mode", "fast"},
                                                {"lit", "x"},
                                                {"rows", std::int64_t{7}},
                                                {"neg", std::int64_t{-2}},
                                                {"big", 18446744073709551615.0}};
  EXPECT_EQ(events[0].args, expected);

  const json_ptr root = parse_json(tracer().chrome_json());
  const auto xs = complete_events(*root);
  ASSERT_EQ(xs.size(), 1u);
  const json& args = xs[0]->at("args");
  EXPECT_EQ(args.at("i").number_text, "3");
  EXPECT_EQ(args.at("scale").num(), 0.5);
  EXPECT_EQ(std::get<bool>(args.at("ok").v), true);
  EXPECT_EQ(args.at("mode").str(), "fast");
  EXPECT_EQ(args.at("lit").str(), "x");
  EXPECT_EQ(args.at("rows").number_text, "7");
  EXPECT_EQ(args.at("neg").number_text, "-2");
  EXPECT_EQ(args.at("big").num(), 18446744073709551615.0);
}

TEST_F(TraceArgs, NonFiniteDoublesStayValidJson) {
  tracer().start();
  { xshard::trace_me t("nf", {{"nan", std::nan("")}, {"inf", HUGE_VAL}, {"ninf", -HUGE_VAL}, {"tiny", 1e-300}}); }
  tracer().stop();
  const json_ptr root = parse_json(tracer().chrome_json());
  const json& args = complete_events(*root).at(0)->at("args");
  EXPECT_EQ(args.at("nan").str(), "NaN");
  EXPECT_EQ(args.at("inf").str(), "Infinity");
  EXPECT_EQ(args.at("ninf").str(), "-Infinity");
  EXPECT_EQ(args.at("tiny").num(), 1e-300);
}

TEST_F(TraceThreads, PerThreadAndPerDeviceAttribution) {
  constexpr int devices = 4;
  constexpr int iterations = 100;
  tracer().start();
  EXPECT_EQ(xshard::current_trace_device(), 0);
  std::vector<std::thread> threads;
  for (int d = 0; d < devices; ++d) {
    threads.emplace_back([d] {
      xshard::trace_device_scope device(d + 10);
      EXPECT_EQ(xshard::current_trace_device(), d + 10);
      xshard::trace_me body("device/body", {{"device", d + 10}});
      for (int i = 0; i < iterations; ++i) xshard::trace_me it("device/iter", {{"i", i}});
      {
        xshard::trace_device_scope inner(99);  // nests and restores
        xshard::trace_me t("device/inner");
      }
      EXPECT_EQ(xshard::current_trace_device(), d + 10);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(xshard::current_trace_device(), 0);
  { xshard::trace_me t("main"); }
  tracer().stop();

  const auto events = tracer().events();
  ASSERT_EQ(events.size(), static_cast<std::size_t>(devices * (iterations + 2) + 1));
  std::map<int, std::set<std::uint32_t>> tids_of_device;
  std::map<std::uint32_t, int> device_of_tid;
  for (const auto& e : events) {
    if (e.name == "device/inner") {
      EXPECT_EQ(e.device, 99);
      continue;
    }
    tids_of_device[e.device].insert(e.tid);
    if (e.name == "main") continue;
    const auto [it, fresh] = device_of_tid.emplace(e.tid, e.device);
    EXPECT_EQ(it->second, e.device) << "a thread's events moved between devices";
  }
  EXPECT_EQ(tids_of_device.size(), static_cast<std::size_t>(devices + 1));  // 10..13 and 0
  for (int d = 0; d < devices; ++d) EXPECT_EQ(tids_of_device[d + 10].size(), 1u);
  EXPECT_EQ(device_of_tid.size(), static_cast<std::size_t>(devices));
  // Each thread's iterations are inside its body and in order.
  for (const auto& [tid, device] : device_of_tid) {
    const xshard::trace_event* body = nullptr;
    std::int64_t last_i = -1;
    for (const auto& e : events) {
      if (e.tid != tid || e.device != device) continue;
      if (e.name == "device/body") {
        body = &e;
        EXPECT_EQ(e.args.at(0), (xshard::trace_arg{"device", std::int64_t{device}}));
      } else {
        ASSERT_NE(body, nullptr) << "the body comes first";
        EXPECT_TRUE(inside(e, *body));
        const auto i = std::get<std::int64_t>(e.args.at(0).value);
        EXPECT_EQ(i, last_i + 1);
        last_i = i;
      }
    }
    EXPECT_EQ(last_i, iterations - 1);
  }

  // The JSON: one process per device named "device <id>", thread names per (pid, tid).
  const json_ptr root = parse_json(tracer().chrome_json());
  std::map<int, std::string> process_names;
  std::set<std::pair<int, int>> named_threads, used_threads;
  for (const json_ptr& e : root->at("traceEvents").arr()) {
    const int pid = static_cast<int>(e->at("pid").num());
    const int tid = static_cast<int>(e->at("tid").num());
    if (e->at("ph").str() == "M" && e->at("name").str() == "process_name")
      process_names[pid] = e->at("args").at("name").str();
    if (e->at("ph").str() == "M" && e->at("name").str() == "thread_name") {
      named_threads.emplace(pid, tid);
      EXPECT_EQ(e->at("args").at("name").str(), "thread " + std::to_string(tid));
    }
    if (e->at("ph").str() == "X") used_threads.emplace(pid, tid);
  }
  EXPECT_EQ(process_names, (std::map<int, std::string>{{0, "device 0"},
                                                       {10, "device 10"},
                                                       {11, "device 11"},
                                                       {12, "device 12"},
                                                       {13, "device 13"},
                                                       {99, "device 99"}}));
  EXPECT_EQ(named_threads, used_threads);
}

TEST_F(TraceThreads, EventsOutliveTheirThread) {
  tracer().start();
  std::thread([] {
    xshard::set_trace_thread_name("short-lived \"worker\"");
    xshard::trace_me t("gone");
  }).join();
  tracer().stop();
  const auto events = tracer().events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "gone");
  const json_ptr root = parse_json(tracer().chrome_json());
  bool found = false;
  for (const json_ptr& e : root->at("traceEvents").arr())
    if (e->at("name").str() == "thread_name" && e->at("tid").num() == events[0].tid) {
      EXPECT_EQ(e->at("args").at("name").str(), "short-lived \"worker\"");
      found = true;
    }
  EXPECT_TRUE(found);
  tracer().clear();  // forgets the exited thread
  EXPECT_TRUE(tracer().events().empty());
}

TEST_F(TraceThreads, WritingWhileThreadsTrace) {
  constexpr int per_thread = 20000;
  tracer().start();
  std::atomic<int> running{3};
  std::vector<std::thread> threads;
  for (int d = 0; d < 3; ++d)
    threads.emplace_back([d, &running] {
      xshard::trace_device_scope device(d);
      for (int i = 0; i < per_thread; ++i) xshard::trace_me t("busy", {{"i", i}});
      --running;
    });
  int writes = 0;
  do {
    EXPECT_NO_THROW(parse_json(tracer().chrome_json()));
    ++writes;
  } while (running.load() > 0);
  for (std::thread& t : threads) t.join();
  tracer().stop();
  EXPECT_GE(writes, 1);
  EXPECT_EQ(tracer().events().size(), 3u * per_thread);
}

TEST_F(TraceJson, ValidWithFieldsAndMetadata) {
  tracer().start();
  {
    xshard::trace_device_scope d(2);
    xshard::trace_me t("layer3/forward");
  }
  tracer().stop();
  std::ostringstream os;
  tracer().write_chrome_json(os);
  const std::string text = os.str();
  EXPECT_EQ(text, tracer().chrome_json());
  const json_ptr root = parse_json(text);
  ASSERT_TRUE(root->is_object());
  EXPECT_EQ(root->obj().size(), 2u);
  EXPECT_EQ(root->at("displayTimeUnit").str(), "ms");
  const auto& all = root->at("traceEvents").arr();
  // process_name, process_sort_index, thread_name, thread_sort_index, the event
  ASSERT_EQ(all.size(), 5u);
  const auto xs = complete_events(*root);
  ASSERT_EQ(xs.size(), 1u);
  const json& e = *xs[0];
  EXPECT_EQ(e.at("name").str(), "layer3/forward");
  EXPECT_EQ(e.at("cat").str(), "xshard");
  EXPECT_EQ(e.at("pid").num(), 2);
  EXPECT_GE(e.at("tid").num(), 1);
  EXPECT_TRUE(e.at("args").is_object());
  // ts and dur: microseconds with three decimals (nanoseconds exact).
  for (const char* key : {"ts", "dur"}) {
    const std::string& n = e.at(key).number_text;
    ASSERT_GE(n.size(), 5u) << n;
    EXPECT_EQ(n[n.size() - 4], '.') << n;
    EXPECT_GE(e.at(key).num(), 0.0);
  }
  const auto recorded = tracer().events().at(0);
  EXPECT_NEAR(e.at("ts").num(), static_cast<double>(recorded.ts_ns) / 1000.0, 1e-6);
  EXPECT_NEAR(e.at("dur").num(), static_cast<double>(recorded.dur_ns) / 1000.0, 1e-6);
  for (const json_ptr& m : all) {
    if (m->at("ph").str() != "M") continue;
    EXPECT_EQ(m->at("pid").num(), 2);
    const std::string& name = m->at("name").str();
    if (name == "process_name") {
      EXPECT_EQ(m->at("args").at("name").str(), "device 2");
    }
    if (name == "process_sort_index") {
      EXPECT_EQ(m->at("args").at("sort_index").num(), 2);
    }
  }
}

TEST_F(TraceJson, MicrosecondFormatting) {
  const auto us = [](std::int64_t ns) {
    std::string out;
    xshard::detail::append_us(out, ns);
    return out;
  };
  EXPECT_EQ(us(0), "0.000");
  EXPECT_EQ(us(7), "0.007");
  EXPECT_EQ(us(1234567), "1234.567");
  EXPECT_EQ(us(1000), "1.000");
  EXPECT_EQ(us(-1500), "-1.500");
}

TEST_F(TraceJson, EscapesNamesKeysAndValues) {
  const std::string nasty = std::string("q\"b\\s/n\nr\rt\tb\bf\fc\x01z\x1f") + "\x7f" + "é€😀" + "\xff" + "\xc3";
  tracer().start();
  {
    xshard::trace_me t(nasty, {{nasty, nasty}});
    t.arg("plain", "v");
  }
  tracer().stop();
  const std::string text = tracer().chrome_json();
  // No raw control characters inside the text other than the newlines between events.
  for (char c : text) EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 || c == '\n') << int(c);
  const json_ptr root = parse_json(text);
  const auto xs = complete_events(*root);
  ASSERT_EQ(xs.size(), 1u);
  const std::string expected = std::string("q\"b\\s/n\nr\rt\tb\bf\fc\x01z\x1f") + "\x7f" + "é€😀" + "\xef\xbf\xbd" +
                               "\xef\xbf\xbd";  // invalid bytes -> U+FFFD
  EXPECT_EQ(xs[0]->at("name").str(), expected);
  EXPECT_EQ(xs[0]->at("args").at(expected).str(), expected);
  EXPECT_EQ(xs[0]->at("args").at("plain").str(), "v");
  // The exact escapes.
  std::string s;
  xshard::detail::append_json_string(s, "a\"b\\c\nd\x01");
  EXPECT_EQ(s, R"("a\"b\\c\nd\u0001")");
  s.clear();
  xshard::detail::append_json_string(s, "\xed\xa0\x80");  // a UTF-16 surrogate in UTF-8: invalid
  EXPECT_EQ(s, R"("\ufffd\ufffd\ufffd")");
}

TEST_F(TraceJson, WritesFileAndReportsBadPath) {
  tracer().start();
  { xshard::trace_me t("to file"); }
  tracer().stop();
  const std::string path = ::testing::TempDir() + "xshard_trace_test.json";
  tracer().write_chrome_json(path);
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, tracer().chrome_json());
  EXPECT_EQ(complete_events(*parse_json(text)).at(0)->at("name").str(), "to file");
  std::remove(path.c_str());
  EXPECT_THROW(tracer().write_chrome_json(std::string("/nonexistent-dir/x/trace.json")), xshard::error);
}

// The trace file a child process wrote at exit holds exactly one complete
// event, named `name`; the file is removed.
void expect_one_event_file(const std::string& path, std::string_view name) {
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "no trace written to " << path;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const json_ptr root = parse_json(text);
  const auto xs = complete_events(*root);
  ASSERT_EQ(xs.size(), 1u);
  EXPECT_EQ(xs[0]->at("name").str(), name);
  std::remove(path.c_str());
}

// XSHARD_TRACE: in a child process, start as the variable does, trace, exit;
// the parent reads the file written at exit.
TEST(TraceEnvDeathTest, WritesTraceAtExit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = ::testing::TempDir() + "xshard_trace_env_test.json";
  std::remove(path.c_str());
  EXPECT_EXIT(
      {
        xshard::detail::trace_to_file_at_exit(path.c_str());
        { xshard::trace_me t("at exit"); }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  expect_one_event_file(path, "at exit");
}

// The variable itself: read when the process first touches the tracer (here
// the first scope), not by a static initialiser; nothing traced before.
TEST(TraceEnvDeathTest, VariableIsReadOnFirstUse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: no tracer yet
  const std::string path = ::testing::TempDir() + "xshard_trace_env_var_test.json";
  std::remove(path.c_str());
  EXPECT_EXIT(
      {
        if (xshard::detail::trace_mode.load() != xshard::detail::trace_unread) std::exit(3);
        ::setenv("XSHARD_TRACE", path.c_str(), 1);
        { xshard::trace_me t("first scope"); }
        if (!xshard::tracer::instance().enabled()) std::exit(4);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  expect_one_event_file(path, "first scope");
}

}  // namespace

#include <xshard/spmd/thread_mesh.hpp>

namespace {

// Scopes opened inside a thread_mesh body belong to that device.
TEST(TraceSpmd, ThreadMeshDevicesAreTraceProcesses) {
  auto& tr = xshard::tracer::instance();
  tr.clear();
  tr.start();
  xshard::thread_mesh<xshard::mesh<"x=2, y=2", 3, 1, 2, 0>> mesh;  // position p holds device ids[p]
  mesh.run([](auto& dev) {
    const std::string name = "body" + std::to_string(dev.position());
    xshard::trace_me t(name);
  });
  tr.stop();
  std::map<std::string, int> device_of;
  for (const auto& e : tr.events()) device_of[e.name] = e.device;
  EXPECT_EQ(device_of["body0"], 3);
  EXPECT_EQ(device_of["body1"], 1);
  EXPECT_EQ(device_of["body2"], 2);
  EXPECT_EQ(device_of["body3"], 0);
  tr.clear();
}

}  // namespace
