// Compile-time inspection of einsum equations: einsum_equation_v (index
// classes, output subscripts), einsum_canonical, and the constexpr engine
// (parse_einsum, bind_einsum, einsum_output_rank, einsum_label_extents,
// plan_einsum) called directly. static_asserts only.
//
// Index classes follow parse.hpp's definitions, for a label c:
//   in no input -> absent; in 2+ inputs -> batch if in the output, else
//   contracted; in 1 input, not in the output -> summed; in 1 input and the
//   output -> free_left / free_right (which input, when there are exactly
//   two), else free. '.' (the ellipsis) is classified like a letter.
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <xshard/xshard.hpp>
#include <xtensor/xfixed.hpp>

namespace {

using xshard::einsum_canonical;
using xshard::einsum_equation_v;
using xshard::errc;
using xshard::index_class;
using xshard::parse_einsum;

/// The labels of a term as text, '.' for the ellipsis.
constexpr bool labels_are(const xshard::einsum_term& t, std::string_view want) {
  if (t.labels.size() != want.size()) return false;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (t.labels[i] != want[i]) return false;
  return true;
}

// "...n,mn->...m" (the einsum linear layer): x's leading dims are free on the
// left, n is contracted, m is free on the right.
constexpr auto linear = einsum_equation_v<"...n,mn->...m">;
static_assert(linear.operands() == 2);
static_assert(linear.explicit_output);
static_assert(labels_are(linear.inputs[0], ".n") && labels_are(linear.inputs[1], "mn"));
static_assert(labels_are(linear.output, ".m"));
static_assert(linear.classify('.') == index_class::free_left);
static_assert(linear.classify('n') == index_class::contracted);
static_assert(linear.classify('m') == index_class::free_right);
static_assert(linear.classify('x') == index_class::absent);
static_assert(einsum_canonical<"...n,mn->...m">() == "...n,mn->...m");

// Its gradients: '...m,mn->...n' (input), '...m,...n->mn' (weight: the
// ellipsis is in both inputs and not the output -> contracted), '...m->m'.
static_assert(einsum_equation_v<"...m,mn->...n">.classify('m') == index_class::contracted);
static_assert(einsum_equation_v<"...m,mn->...n">.classify('n') == index_class::free_right);
static_assert(einsum_equation_v<"...m,...n->mn">.classify('.') == index_class::contracted);
static_assert(einsum_equation_v<"...m,...n->mn">.classify('m') == index_class::free_left);
static_assert(einsum_equation_v<"...m,...n->mn">.classify('n') == index_class::free_right);
static_assert(einsum_equation_v<"...m->m">.classify('.') == index_class::summed);
static_assert(einsum_equation_v<"...m->m">.classify('m') == index_class::free);

// Implicit output: the letters used once, sorted.
constexpr auto mm = einsum_equation_v<"ij,jk">;
static_assert(!mm.explicit_output);
static_assert(labels_are(mm.output, "ik"));
static_assert(mm.classify('i') == index_class::free_left);
static_assert(mm.classify('j') == index_class::contracted);
static_assert(mm.classify('k') == index_class::free_right);
static_assert(einsum_canonical<"ij,jk">() == "ij,jk->ik");
static_assert(einsum_canonical<" i j , j k -> i k ">() == "ij,jk->ik");
static_assert(einsum_equation_v<" i j , j k -> i k ">.explicit_output);

// Batched: b in both inputs and the output.
static_assert(einsum_equation_v<"bij,bjk->bik">.classify('b') == index_class::batch);
static_assert(einsum_equation_v<"bhqd,bhkd->bhqk">.classify('h') == index_class::batch);
static_assert(einsum_equation_v<"bhqd,bhkd->bhqk">.classify('d') == index_class::contracted);
static_assert(einsum_equation_v<"bhqd,bhkd->bhqk">.classify('k') == index_class::free_right);
static_assert(einsum_equation_v<"ij,ij->ij">.classify('i') == index_class::batch);

// Uppercase before lowercase; the order of the input letters does not matter.
static_assert(einsum_canonical<"ba">() == "ba->ab");
static_assert(einsum_canonical<"bA">() == "bA->Ab");
static_assert(einsum_canonical<"zZ,aA">() == "zZ,aA->AZaz");
static_assert(einsum_canonical<"j,i">() == "j,i->ij");
static_assert(einsum_equation_v<"j,i">.classify('j') == index_class::free_left);
static_assert(einsum_equation_v<"j,i">.classify('i') == index_class::free_right);

// Diagonals and sums inside one operand.
static_assert(einsum_canonical<"ii">() == "ii->");
static_assert(einsum_equation_v<"ii">.classify('i') == index_class::summed);
static_assert(einsum_equation_v<"ii->i">.classify('i') == index_class::free);
static_assert(einsum_canonical<"iij">() == "iij->j");
static_assert(einsum_equation_v<"ij->">.classify('j') == index_class::summed);
static_assert(einsum_equation_v<"ij->ji">.classify('i') == index_class::free);
static_assert(einsum_equation_v<"ij,jk->i">.classify('k') == index_class::summed);
static_assert(einsum_equation_v<"ij,jk->i">.classify('j') == index_class::contracted);
static_assert(einsum_equation_v<"ij,jk->i">.classify('i') == index_class::free_left);
static_assert(einsum_canonical<"ij,jk->i">() == "ij,jk->i");
static_assert(einsum_equation_v<"...ii->...i">.classify('.') == index_class::free);

// Ellipses: implicit output puts "..." first.
static_assert(einsum_canonical<"...ij,...jk">() == "...ij,...jk->...ik");
static_assert(einsum_equation_v<"...ij,...jk">.classify('.') == index_class::batch);
static_assert(einsum_canonical<"i...">() == "i...->...i");
static_assert(einsum_canonical<"i...,j">() == "i...,j->...ij");
static_assert(einsum_canonical<"...">() == "...->...");

// Outer products, scalars, empty terms.
static_assert(einsum_canonical<"i,j">() == "i,j->ij");
static_assert(einsum_canonical<"i,i">() == "i,i->");
static_assert(einsum_canonical<",">() == ",->");
static_assert(einsum_canonical<",i">() == ",i->i");
static_assert(einsum_canonical<"->">() == "->");
static_assert(einsum_equation_v<",i">.operands() == 2);
static_assert(einsum_equation_v<"->">.operands() == 1);

// Three operands: no left/right, only free.
constexpr auto chain = einsum_equation_v<"ab,bc,cd->ad">;
static_assert(chain.operands() == 3);
static_assert(chain.classify('a') == index_class::free);
static_assert(chain.classify('b') == index_class::contracted);
static_assert(chain.classify('c') == index_class::contracted);
static_assert(chain.classify('d') == index_class::free);
static_assert(einsum_equation_v<"ab,bc,cd->abd">.classify('b') == index_class::batch);
static_assert(einsum_canonical<"Ba,aB,Cc">() == "Ba,aB,Cc->Cc");
static_assert(einsum_equation_v<"Ba,aB,Cc">.classify('C') == index_class::free);
static_assert(einsum_equation_v<"Ba,aB,Cc">.classify('a') == index_class::contracted);

// The typed inspection is the constexpr parser's value.
static_assert(einsum_equation_v<"ij,jk"> == parse_einsum("ij,jk").value);
static_assert(!(einsum_equation_v<"ij,jk"> == parse_einsum("ij,jk->ik").value));  // explicit vs implicit

// ---------------------------------------------------------------------------
// The constexpr engine directly.

// Parse errors: code, 1-based column, character.
static_assert(parse_einsum("ij,j1->ik").diag.code == errc::einsum_syntax);
static_assert(parse_einsum("ij,j1->ik").diag.column == 5 && parse_einsum("ij,j1->ik").diag.ch == '1');
static_assert(parse_einsum("i.j").diag.code == errc::einsum_ellipsis && parse_einsum("i.j").diag.column == 2);
static_assert(parse_einsum("..").diag.code == errc::einsum_ellipsis);
static_assert(parse_einsum("...i...").diag.code == errc::einsum_two_ellipses);
static_assert(parse_einsum("...i...").diag.column == 5);
static_assert(parse_einsum("ij->ix").diag.code == errc::einsum_output_unknown);
static_assert(parse_einsum("ij->ix").diag.column == 6 && parse_einsum("ij->ix").diag.ch == 'x');
static_assert(parse_einsum("ij->jj").diag.code == errc::einsum_output_twice);
static_assert(parse_einsum("ij->...").diag.code == errc::einsum_output_ellipsis);
static_assert(parse_einsum("ij->...").diag.column == 5);
static_assert(parse_einsum("ij->i->j").diag.code == errc::einsum_syntax);
static_assert(parse_einsum("abcdefghijklmnopqrstuvwxy").diag.code == errc::einsum_too_many);
static_assert(parse_einsum("abcdefghijklmnopqrstuvwx").ok());  // 24 letters fit

// Binding to ranks: ellipsis dims are the most any operand has.
constexpr std::array<std::int64_t, 2> r32{3, 2};
constexpr std::array<std::int64_t, 2> r12{1, 2};
constexpr std::array<std::int64_t, 2> r22{2, 2};
constexpr std::array<std::int64_t, 1> r1{1};
static_assert(xshard::einsum_output_rank(linear, r32) == 3);
static_assert(xshard::einsum_output_rank(linear, r12) == 1);
static_assert(xshard::einsum_output_rank(einsum_equation_v<"...m,...n->mn">, r32) == 2);
static_assert(xshard::einsum_output_rank(mm, r22) == 2);
static_assert(xshard::einsum_output_rank(mm, r32) == -1);  // operand 0 has rank 3
static_assert(xshard::einsum_output_rank(mm, r1) == -1);   // one operand for two terms
static_assert(xshard::bind_einsum(mm, r32).diag.code == errc::einsum_rank);
static_assert(xshard::bind_einsum(mm, r32).diag.column == 0);
static_assert(xshard::bind_einsum(mm, r32).diag.a == 2 && xshard::bind_einsum(mm, r32).diag.b == 3);
static_assert(xshard::bind_einsum(mm, r1).diag.code == errc::einsum_operand_count);
constexpr std::array<std::int64_t, 2> r43{4, 3};
static_assert(xshard::bind_einsum(einsum_equation_v<"...ij,...jk">, r43).value.ellipsis_dims == 2);

// Extents: broadcast, mismatches named by letter and both extents.
constexpr std::int64_t s23[] = {2, 3}, s45[] = {4, 5}, s13[] = {1, 3}, s34[] = {3, 4}, s33[] = {3, 3};
constexpr auto extents_diag = [](std::string_view eq, std::span<const std::int64_t> a,
                                 std::span<const std::int64_t> b) {
  const auto e = parse_einsum(eq).value;
  const std::array<std::int64_t, 2> ranks{static_cast<std::int64_t>(a.size()), static_cast<std::int64_t>(b.size())};
  const std::array<std::span<const std::int64_t>, 2> shapes{a, b};
  return xshard::einsum_label_extents(xshard::bind_einsum(e, ranks).value, shapes);
};
static_assert(extents_diag("ij,jk->ik", s23, s34).ok());
static_assert(extents_diag("ij,jk->ik", s23, s34).value.of[xshard::label_id('k')] == 4);
static_assert(extents_diag("ij,jk->ik", s23, s45).diag.code == errc::einsum_extent);
static_assert(extents_diag("ij,jk->ik", s23, s45).diag.ch == 'j');
static_assert(extents_diag("ij,jk->ik", s23, s45).diag.a == 3 && extents_diag("ij,jk->ik", s23, s45).diag.b == 4);
static_assert(extents_diag("ij,ij->ij", s13, s23).value.of[xshard::label_id('i')] == 2);  // 1 broadcasts
static_assert(extents_diag("ii,jk->i", s34, s33).diag.code == errc::einsum_diagonal);
static_assert(extents_diag("ii,jk->i", s34, s33).diag.column == 0 && extents_diag("ii,jk->i", s34, s33).diag.ch == 'i');

// Label ids: A-Z are 0-25, a-z 26-51.
static_assert(xshard::label_id('A') == 0 && xshard::label_id('z') == 51);
static_assert(xshard::label_char(xshard::label_id('q')) == 'q');

// Greedy plan: with a=b=c=10 and d=1000, "ab,bc,cd->ad" contracts the cheap
// pair (0, 1) first (10^3 multiply-adds) rather than (1, 2) (10^5).
constexpr auto chain_plan = [] {
  constexpr std::int64_t sa[] = {10, 10}, sb[] = {10, 10}, sc[] = {10, 1000};
  const std::array<std::int64_t, 3> ranks{2, 2, 2};
  const auto bind = xshard::bind_einsum(chain, ranks).value;
  const std::array<std::span<const std::int64_t>, 3> shapes{sa, sb, sc};
  return xshard::plan_einsum(bind, xshard::einsum_label_extents(bind, shapes).value);
}();
static_assert(chain_plan.steps.size() == 2);
static_assert(chain_plan.steps[0].lhs == 0 && chain_plan.steps[0].rhs == 1);
static_assert(chain_plan.steps[0].cost == 1000);
static_assert(chain_plan.total_cost == 1000 + 10 * 10 * 1000);

}  // namespace

// With static extents the contraction order of 3+ operands is planned at
// compile time: (2x100)(100x3) first costs 600, against 15000 for
// (100x3)(3x50) and 30000 for the outer pair.
namespace static_plan_check {
using A = xt::xtensor_fixed<float, xt::xshape<2, 100>>;
using B = xt::xtensor_fixed<float, xt::xshape<100, 3>>;
using C = xt::xtensor_fixed<float, xt::xshape<3, 50>>;
constexpr const xshard::contraction_order* plan = xshard::detail::static_plan<"ij,jk,kl->il", A, B, C>();
static_assert(plan->steps.size() == 2);
static_assert(plan->steps[0].lhs == 0 && plan->steps[0].rhs == 1 && plan->steps[0].cost == 600);
static_assert(plan->total_cost == 600 + 2 * 3 * 50);
static_assert(xshard::detail::static_plan<"ij,jk,kl->il", xt::xtensor<float, 2>, B, C>() == nullptr);  // dynamic
}  // namespace static_plan_check
