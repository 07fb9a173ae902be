// Tests of xshard/mesh/topology.hpp: the topology JSON reader and writer.
//
// Columns in the expected messages were counted by hand (and double-checked
// with Python's str.index on the same literals), 1-based.
#include "xshard/mesh/topology.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "../support/expect_error.hpp"

namespace xshard {
void PrintTo(const device_attributes& d, std::ostream* os) {
  *os << "{id " << d.id << ", coords (" << d.coords[0] << ", " << d.coords[1] << ", " << d.coords[2] << ")";
  if (d.slice_index) *os << ", slice " << *d.slice_index;
  *os << "}";
}
}  // namespace xshard

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using xshard::device_attributes;
using devices = std::vector<device_attributes>;

std::string parse_error(std::string_view json) {
  return xshard_test::error_of([&] { (void)xshard::parse_topology(json); });
}

devices parse_ok(std::string_view json) {
  try {
    return xshard::parse_topology(json);
  } catch (const xshard::error& e) {
    ADD_FAILURE() << "unexpected error: " << e.what() << "\n  for: " << json;
    return {};
  }
}

// A valid document with no trailing whitespace, so that every proper prefix
// is incomplete.
constexpr std::string_view valid_doc =
    R"([{"id": 0, "coords": [0, 0, 0], "slice_index": 0}, {"coords": [1, 0, 0], "slice_index": 0, "id": 1},)"
    "\n"
    R"( {"slice_index": 1, "id": 12, "coords": [0, 1, 2]}])";

// ---------------------------------------------------------------------------
// Reading valid documents.

TEST(ParseTopology, ReadsDevicesWithKeysInAnyOrder) {
  EXPECT_THAT(parse_ok(valid_doc), ElementsAre(device_attributes{0, {0, 0, 0}, 0}, device_attributes{1, {1, 0, 0}, 0},
                                               device_attributes{12, {0, 1, 2}, 1}));
}

TEST(ParseTopology, WhitespaceEscapesAndEdgeValues) {
  // Tabs, CR/LF and spaces anywhere between tokens; "\u0069d" is "id";
  // -0 is 0; INT_MAX fits.
  const std::string_view doc =
      "\xEF\xBB\xBF \r\n\t[ \t{ \"\\u0069d\" \n: -0 ,\"coords\"\r\n:[ 2147483647 ,0,\t0 ] } \n]\r\n ";
  EXPECT_THAT(parse_ok(doc), ElementsAre(device_attributes{0, {INT_MAX, 0, 0}, std::nullopt}));
  EXPECT_THAT(parse_ok("[]"), ElementsAre());
  EXPECT_THAT(parse_ok(" [ ] "), ElementsAre());
}

TEST(ParseTopology, SliceIndexIsOptionalForAllDevices) {
  EXPECT_THAT(
      parse_ok(R"([{"id": 3, "coords": [0, 0, 0]}, {"id": 2, "coords": [1, 0, 0]}])"),
      ElementsAre(device_attributes{3, {0, 0, 0}, std::nullopt}, device_attributes{2, {1, 0, 0}, std::nullopt}));
}

TEST(ParseTopology, WorksAtCompileTime) {
  static_assert(xshard::parse_topology(R"([{"id": 5, "coords": [1, 2, 3], "slice_index": 4}])").size() == 1);
  static_assert(xshard::parse_topology(R"([{"id": 5, "coords": [1, 2, 3], "slice_index": 4}])")[0] ==
                device_attributes{5, {1, 2, 3}, 4});
  static_assert(!xshard::try_parse_topology(R"([{"id": 5}])").ok());
}

// ---------------------------------------------------------------------------
// Round trip.

TEST(ToJson, RoundTrips) {
  const std::vector<devices> lists = {
      {},
      {{0, {0, 0, 0}, std::nullopt}},
      {{7, {3, 2, 1}, 0}, {0, {0, 0, 0}, 5}, {INT_MAX, {INT_MAX, 0, INT_MAX}, INT_MAX}},
      {{4, {1, 1, 0}, std::nullopt}, {1, {0, 1, 0}, std::nullopt}, {2, {1, 0, 0}, std::nullopt}},
  };
  for (const devices& d : lists) {
    const std::string json = xshard::to_json(d);
    SCOPED_TRACE(json);
    EXPECT_EQ(parse_ok(json), d);
    EXPECT_EQ(xshard::to_json(parse_ok(json)), json);  // and the text is stable
  }
  EXPECT_EQ(xshard::to_json(devices{}), "[]");
  EXPECT_EQ(xshard::to_json(devices{{1, {2, 3, 4}, 5}}),
            "[\n  {\"id\": 1, \"coords\": [2, 3, 4], \"slice_index\": 5}\n]");
}

TEST(ToJson, RefusesWhatTheParserWouldRefuse) {
  auto error_of = [](const devices& d) { return xshard_test::error_of([&] { (void)xshard::to_json(d); }); };
  EXPECT_THAT(error_of({{0, {0, 0, 0}, 0}, {1, {1, 0, 0}, std::nullopt}}), HasSubstr("\"slice_index\" must be given"));
  EXPECT_THAT(error_of({{0, {0, 0, 0}, {}}, {0, {1, 0, 0}, {}}}), HasSubstr("duplicate device id 0"));
  EXPECT_THAT(error_of({{-1, {0, 0, 0}, {}}}), HasSubstr("\"id\" must be a non-negative integer, got -1"));
}

// ---------------------------------------------------------------------------
// Syntax errors: column and character.

struct syntax_case {
  const char* json;
  const char* expected;  // a substring of the message
};

TEST(ParseTopology, SyntaxErrorsNameColumnAndCharacter) {
  const std::vector<syntax_case> cases = {
      {R"({"id": 0})", "unexpected '{' at column 1 (expected '[' starting the list of devices)"},
      {R"([{"id": 0, "coords": [0, 0, x]}])", "malformed topology: unexpected 'x' at column 29"},
      {R"([{"id": +1, "coords": [0, 0, 0]}])", "unexpected '+' at column 9 (expected an integer for \"id\")"},
      {R"([{"id": 1.5, "coords": [0, 0, 0]}])", "unexpected '.' at column 10 (expected an integer; fractions"},
      {R"([{"id": 1e3, "coords": [0, 0, 0]}])", "unexpected 'e' at column 10 (expected an integer; exponents"},
      {R"([{"id": 1E3, "coords": [0, 0, 0]}])", "unexpected 'E' at column 10"},
      {R"([{"id": 1, "coords": [0, 2.0, 0]}])", "unexpected '.' at column 27"},
      {R"([{"id": 01, "coords": [0, 0, 0]}])", "unexpected '1' at column 10 (expected no leading zeros"},
      {R"([{"id": 1, "coords": [0, 0, 0]},])", "unexpected ']' at column 33 (expected '{' starting a device)"},
      {R"([{"id": 1, "coords": [0, 0, 0],}])", "unexpected '}' at column 32 (expected '\"' starting a key)"},
      {R"([{"id": 1, "coords": [0, 0, 0]}] x)", "unexpected 'x' at column 34 (expected nothing after"},
      {R"([{"id": 1 "coords": [0, 0, 0]}])", "unexpected '\"' at column 11 (expected ',' or '}' after a value)"},
      {R"([{"id" 1, "coords": [0, 0, 0]}])", "unexpected '1' at column 8 (expected ':' after a key)"},
      {R"([{id: 1}])", "unexpected 'i' at column 3"},
      {R"([{'id': 1}])", "unexpected '\\'' at column 3"},
      {R"([{"id": "1", "coords": [0, 0, 0]}])", "unexpected '\"' at column 9"},
      {R"([{"id": null}])", "unexpected 'n' at column 9"},
      {R"([{"id": -, "coords": [0, 0, 0]}])", "unexpected ',' at column 10"},
      {R"([{"id": 1, "coords": [0; 0, 0]}])", "unexpected ';' at column 24 (expected ',' or ']' in \"coords\")"},
      {R"([{"id": 1, "coords": 0}])", "unexpected '0' at column 22 (expected '[' starting \"coords\")"},
      {R"([[0]])", "unexpected '[' at column 2"},
      {R"([{"i\d": 1}])", "unexpected 'd' at column 6"},
      {R"([{"\u00g0": 1}])", "unexpected 'g' at column 8 (expected 4 hex digits after \\u)"},
      {R"([{"\u00"}])", "unexpected '\"' at column 8 (expected 4 hex digits after \\u)"},
      {R"([{"id": 1, "coords": [0, 0, 0]} {"id": 2}])",
       "unexpected '{' at column 33 (expected ',' or ']' after a device)"},
      {"", "unexpected end of text at column 1"},
      {"   ", "unexpected end of text at column 4"},
      {"[{\"id\": 1, \"coords\": [0, 0, 0]}\x01]", "unexpected '\\x01' at column 32"},
      {"[{\"id\": 1, \"coords\": [0, 0, 0]}\xff]", "unexpected '\\xff' at column 32"},
      {"[{\"i\nd\": 1}]", "unexpected '\\x0a' at line 1, column 5 (expected a printable character"},
  };
  for (const syntax_case& c : cases) EXPECT_THAT(parse_error(c.json), HasSubstr(c.expected)) << "for: " << c.json;
}

TEST(ParseTopology, MultiLineDocumentsReportLineAndColumn) {
  const std::string doc = "[\n  {\"id\": 0, \"coords\": [0, 0, 0]},\n  {\"id\": 1, \"coords\": [0, 0, ?]}\n]";
  EXPECT_THAT(parse_error(doc), HasSubstr("unexpected '?' at line 3, column 30"));
  EXPECT_THAT(parse_error("[\n{\"id\": 1,}\n]"), HasSubstr("unexpected '}' at line 2, column 10"));
}

TEST(ParseTopology, MessagesStartWithTheLibraryName) {
  EXPECT_THAT(parse_error("x"), MatchesRegex("xshard: malformed topology: unexpected 'x' at column 1 .*"));
}

// ---------------------------------------------------------------------------
// Keys.

TEST(ParseTopology, UnknownKeysAreNamed) {
  const std::string m = parse_error(R"([{"id": 0, "coords": [0, 0, 0], "slice": 1}])");
  EXPECT_THAT(m, HasSubstr("unknown key \"slice\" in device at index 0 (id 0) at column 33"));
  EXPECT_THAT(m, HasSubstr("the keys are \"id\", \"coords\" and \"slice_index\""));
  // Keys are case-sensitive; strange keys are quoted readably and cut short.
  EXPECT_THAT(parse_error(R"([{"ID": 0}])"), HasSubstr("unknown key \"ID\" in device at index 0 at column 3"));
  EXPECT_THAT(parse_error(R"([{"a\"b\u0001": 0}])"), HasSubstr("unknown key \"a\\\"b\\x01\""));
  // \u escapes are decoded to UTF-8 (shown byte by byte); "\/" is '/'.
  EXPECT_THAT(parse_error(R"([{"\u00e9\u20AC\/": 0}])"), HasSubstr("unknown key \"\\xc3\\xa9\\xe2\\x82\\xac/\""));
  EXPECT_THAT(parse_error("[{\"" + std::string(1000, 'k') + "\": 0}]"),
              HasSubstr("unknown key \"" + std::string(40, 'k') + "...\""));
}

TEST(ParseTopology, DuplicateKeysAreNamed) {
  EXPECT_THAT(parse_error(R"([{"id": 0, "coords": [0, 0, 0], "id": 1}])"),
              HasSubstr("duplicate key \"id\" in device at index 0 (id 0) at column 33"));
  EXPECT_THAT(parse_error(R"([{"id": 0, "coords": [0, 0, 0]}, {"coords": [1, 0, 0], "coords": [1, 0, 0]}])"),
              HasSubstr("duplicate key \"coords\" in device at index 1 at column 56"));
  EXPECT_THAT(parse_error(R"([{"slice_index": 0, "id": 3, "coords": [0, 0, 0], "slice_index": 0}])"),
              HasSubstr("duplicate key \"slice_index\" in device at index 0 (id 3)"));
}

TEST(ParseTopology, MissingKeysAreNamed) {
  EXPECT_THAT(parse_error(R"([{"coords": [0, 0, 0]}])"), HasSubstr("device at index 0 is missing the key \"id\""));
  EXPECT_THAT(parse_error(R"([{"id": 0, "coords": [0, 0, 0]}, {"id": 4}])"),
              HasSubstr("device at index 1 (id 4) is missing the key \"coords\""));
  EXPECT_THAT(parse_error(R"([{}])"), HasSubstr("device at index 0 is missing the key \"id\""));
}

// ---------------------------------------------------------------------------
// Values.

TEST(ParseTopology, IntegersMustFitInAnInt) {
  EXPECT_THAT(parse_error(R"([{"id": 2147483648, "coords": [0, 0, 0]}])"),
              HasSubstr("integer at column 9 is out of range (its magnitude must be at most 2147483647)"));
  EXPECT_THAT(parse_error(R"([{"id": 1, "coords": [0, 99999999999999999999999999, 0]}])"),
              HasSubstr("integer at column 26 is out of range"));
  EXPECT_THAT(parse_error(R"([{"id": 1, "coords": [0, 0, 0], "slice_index": -2147483649}])"),
              HasSubstr("integer at column 48 is out of range"));
}

TEST(ParseTopology, BadValuesNameTheDevice) {
  EXPECT_THAT(parse_error(R"([{"id": -1, "coords": [0, 0, 0]}])"),
              HasSubstr("device at index 0 (id -1): \"id\" must be a non-negative integer, got -1"));
  EXPECT_THAT(parse_error(R"([{"id": 0, "coords": [0, 0, 0]}, {"id": 3, "coords": [0, -2, 0]}])"),
              HasSubstr("device at index 1 (id 3): \"coords\" must be 3 non-negative integers, got (0, -2, 0)"));
  EXPECT_THAT(parse_error(R"([{"id": 3, "coords": [0, 0]}])"),
              HasSubstr("device at index 0 (id 3): \"coords\" must be 3 non-negative integers, got 2 values"));
  EXPECT_THAT(parse_error(R"([{"coords": [0, 0, 0, 0], "id": 3}])"),
              HasSubstr("device at index 0 (id 3): \"coords\" must be 3 non-negative integers, got 4 values"));
  EXPECT_THAT(parse_error(R"([{"id": 3, "coords": []}])"), HasSubstr("got 0 values"));
  EXPECT_THAT(parse_error(R"([{"id": 3, "coords": [1]}])"), HasSubstr("got 1 value"));
  EXPECT_THAT(parse_error(R"([{"id": 3, "coords": [1, 0, 0], "slice_index": -1}])"),
              HasSubstr("device at index 0 (id 3): \"slice_index\" must be a non-negative integer, got -1"));
}

TEST(ParseTopology, DuplicateIds) {
  EXPECT_THAT(
      parse_error(
          R"([{"id": 5, "coords": [0, 0, 0]}, {"id": 2, "coords": [1, 0, 0]}, {"id": 5, "coords": [2, 0, 0]}])"),
      HasSubstr("duplicate device id 5 (devices at index 0 and 2)"));
}

TEST(ParseTopology, SliceIndexOnAllOrNone) {
  EXPECT_THAT(parse_error(R"([{"id": 0, "coords": [0, 0, 0], "slice_index": 0}, {"id": 1, "coords": [1, 0, 0]}])"),
              HasSubstr("\"slice_index\" must be given for every device or for none, but device at index 0 (id 0) "
                        "has one and device at index 1 (id 1) does not"));
  EXPECT_THAT(parse_error(R"([{"id": 0, "coords": [0, 0, 0]}, {"id": 1, "coords": [1, 0, 0], "slice_index": 0}])"),
              HasSubstr("device at index 1 (id 1) has one and device at index 0 (id 0) does not"));
}

// ---------------------------------------------------------------------------
// Robustness: no input crashes, hangs or escapes as anything but xshard::error.

TEST(ParseTopology, EveryProperPrefixIsAnError) {
  for (std::size_t n = 0; n < valid_doc.size(); ++n) {
    const std::string prefix(valid_doc.substr(0, n));
    EXPECT_THAT(parse_error(prefix), HasSubstr("end of text")) << "prefix of length " << n << ": " << prefix;
  }
  EXPECT_EQ(parse_ok(valid_doc).size(), 3u);
}

TEST(ParseTopology, DeepNestingIsRejectedWithoutRecursion) {
  EXPECT_THAT(parse_error(std::string(1 << 20, '[')), HasSubstr("unexpected '[' at column 2"));
  EXPECT_THAT(parse_error("[" + std::string(1 << 20, '{')), HasSubstr("unexpected '{' at column 3"));
}

TEST(ParseTopology, LargeDocuments) {
  devices many;
  for (int i = 0; i < 50000; ++i) many.push_back({i, {i % 8, (i / 8) % 8, i / 64}, i / 512});
  EXPECT_EQ(parse_ok(xshard::to_json(many)), many);
}

TEST(ParseTopology, MutatedDocumentsOnlyThrowXshardError) {
  std::mt19937 rng(12345);
  const std::string alphabet = "[]{}\",:-+.eE0123456789 \n\t\\uidcoordsslice_index\x01\xff";
  const std::string base(valid_doc);
  int parsed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = s.empty() ? 0 : rng() % s.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          if (!s.empty()) s[at] = c;
          break;
        case 1:
          s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        default:
          if (!s.empty()) s.erase(at, 1);
          break;
      }
    }
    try {
      (void)xshard::parse_topology(s);
      ++parsed;
    } catch (const xshard::error& e) {
      EXPECT_THAT(e.what(), MatchesRegex("xshard: (malformed|invalid) topology: .*")) << s;
    } catch (...) {
      ADD_FAILURE() << "unexpected exception type for: " << s;
    }
  }
  EXPECT_GT(parsed, 0);  // some edits (inside whitespace, digits) stay valid
  // Random bytes, including NUL.
  for (int iter = 0; iter < 5000; ++iter) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    if (iter % 2) s.insert(0, "[{\"id\": ");
    try {
      (void)xshard::parse_topology(s);
    } catch (const xshard::error&) {
    } catch (...) {
      ADD_FAILURE() << "unexpected exception type";
    }
  }
  EXPECT_THAT(parse_error(std::string_view("[\0]", 3)), HasSubstr("unexpected '\\x00' at column 2"));
}

// ---------------------------------------------------------------------------
// Files.

class TopologyFile : public ::testing::Test {
 protected:
  std::filesystem::path dir_ =
      std::filesystem::path(::testing::TempDir()) /
      ("xshard_topology_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, std::string_view text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  static std::string read_error(const std::string& path) {
    return xshard_test::error_of([&] { (void)xshard::read_topology_file(path); });
  }
};

TEST_F(TopologyFile, ReadsAFile) {
  const devices d = {{0, {0, 0, 0}, 0}, {1, {1, 0, 0}, 0}, {2, {0, 0, 0}, 1}, {3, {1, 0, 0}, 1}};
  EXPECT_EQ(xshard::read_topology_file(write("devices.json", xshard::to_json(d))), d);
}

TEST_F(TopologyFile, ErrorsNameThePath) {
  const std::string missing = (dir_ / "missing.json").string();
  EXPECT_THAT(read_error(missing), HasSubstr("cannot open topology file '" + missing + "'"));
  EXPECT_THAT(read_error(dir_.string()), HasSubstr("topology file '" + dir_.string() + "'"));
  const std::string bad = write("bad.json", "[{\"id\": 0, \"coords\": [0, 0, 0]}");
  const std::string m = read_error(bad);
  EXPECT_THAT(m, HasSubstr("topology file '" + bad + "'"));
  EXPECT_THAT(m, HasSubstr("unexpected end of text at column 32"));
  EXPECT_THAT(read_error(write("empty.json", "")), HasSubstr("unexpected end of text at column 1"));
}

}  // namespace
