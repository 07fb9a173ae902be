// xshard::retain_freed_memory (core/memory.hpp): after it, a freed block
// between glibc's default mmap threshold (128 KiB) and 32 MiB stays in the
// heap for the next allocation instead of going back to the kernel.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <xshard/core/memory.hpp>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define XSHARD_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define XSHARD_TEST_SANITIZED 1
#endif
#endif

namespace {

TEST(Memory, RetainedBlocksStayInTheHeap) {
#if defined(XSHARD_TEST_SANITIZED) || !defined(__GLIBC__)
  GTEST_SKIP() << "the sanitizers' allocator (or a non-glibc one) replaces glibc's heap";
#else
  ASSERT_TRUE(xshard::retain_freed_memory());
  const std::size_t bytes = std::size_t(8) << 20;  // 8 MiB: mmapped by default
  const struct mallinfo2 before = mallinfo2();
  void* volatile p = std::malloc(bytes);  // volatile: not elided
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, bytes);
  const struct mallinfo2 held = mallinfo2();
  EXPECT_EQ(held.hblkhd, before.hblkhd) << "the block was mmapped";
  std::free(p);
  const struct mallinfo2 after = mallinfo2();
  EXPECT_GE(after.fordblks, bytes) << "the freed block left the heap";
  EXPECT_GE(after.arena, before.arena + bytes) << "the heap was trimmed";
#endif
}

}  // namespace
