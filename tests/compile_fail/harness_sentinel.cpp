// Harness sentinel: this snippet compiles even with XSHARD_NEGATIVE defined, so
// compile_fail.harness_sentinel must report a failure. Its CTest test is
// registered WILL_FAIL, so it passes exactly while the harness treats a
// successful compile as a failed compile-fail test. Do not "fix" this file.
// expect: .*

#ifdef XSHARD_NEGATIVE
static_assert(true, "compiles on purpose");
#else
static_assert(true);
#endif
