// A sharded einsum plan whose operand spec has fewer entries than the
// equation's subscripts is a compile error naming the operand (0-based) and
// the two ranks.
// expect: einsum_rank_mismatch<0, *3, *2>
#include <xshard/spmd/einsum.hpp>

using M = xshard::mesh<"data=2, model=2">;

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto plan =
    xshard::einsum_plan<"bsn,mn->bsm", M, xshard::spec<"data, None">, xshard::spec<"model, None">>();
#else
[[maybe_unused]] constexpr auto plan =
    xshard::einsum_plan<"bsn,mn->bsm", M, xshard::spec<"data, None, None">, xshard::spec<"model, None">>();
#endif
