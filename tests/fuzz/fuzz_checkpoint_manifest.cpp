// fuzz_checkpoint_manifest: the checkpoint loader's metadata handling
// (checkpoint/manifest.hpp): the manifest text it parses and checks before
// it trusts any dataset of a checkpoint file.
//
// Input: the manifest text as is; or, when the first byte is '!', the rest
// with a correct "crc32 ..." line appended, so that the fuzzer gets past the
// checksum and explores the fields behind it.
//
// Properties:
//  - a rejected manifest is one xshard::error (nothing else is thrown);
//  - an accepted one is canonical enough: print_manifest(m) parses back to
//    m, and its text is a fixed point of parse and print;
//  - every tensor of an accepted manifest has a valid name (no "..", no
//    empty part, no "xshard_" prefix), distinct from the others, rank <= 16,
//    extents in 0 .. 2^40 and at most 2^60 bytes; format 1.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <xshard/checkpoint/manifest.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(fuzz::as_text(data, size));
  if (!text.empty() && text[0] == '!') {
    text.erase(0, 1);
    text += "crc32 " + xshard::detail::hex32(xshard::detail::crc32(text)) + "\n";
  }
  xshard::checkpoint_manifest m;
  if (!fuzz::accepts([&] { m = xshard::parse_manifest(text, "fuzz.h5"); })) return 0;
  fuzz::check(m.format == xshard::checkpoint_format, "an accepted manifest has format 1");
  std::set<std::string> names;
  for (const xshard::manifest_tensor& t : m.tensors) {
    fuzz::check(xshard::tensor_entry_problem(t).empty(), "every accepted tensor entry is valid", t.name);
    fuzz::check(names.insert(t.name).second, "tensor names are distinct", t.name);
    for (std::size_t at = 0; at <= t.name.size();) {
      const std::size_t end = std::min(t.name.find('/', at), t.name.size());
      const std::string part = t.name.substr(at, end - at);
      fuzz::check(!part.empty() && part != "." && part != "..", "no empty, \".\" or \"..\" name part", t.name);
      at = end + 1;
    }
    fuzz::check(t.shape.size() <= 16, "rank <= 16");
  }
  const std::string printed = xshard::print_manifest(m);
  xshard::checkpoint_manifest back;
  fuzz::check(fuzz::accepts([&] { back = xshard::parse_manifest(printed, "fuzz.h5"); }), "a printed manifest parses",
              printed);
  fuzz::check(back == m, "parse(print(m)) == m", printed);
  fuzz::check(xshard::print_manifest(back) == printed, "print(parse(print(m))) == print(m)", printed);
  return 0;
}
