/*
 * einsum against its definition: a reference that loops over every assignment of the labels,
 * multiplies the operands' elements and adds into the output's (explicit equations of letters);
 * "...", implicit outputs and broadcasting against the same equations written out; errors with
 * torch's wording.
 */
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// sum over all labels' values of prod_k operand_k[its labels] -> output[its labels].
std::vector<double> reference(const std::string& equation, const std::vector<Tensor>& operands) {
  const size_t arrow = equation.find("->");
  const std::string out_term = equation.substr(arrow + 2);
  std::vector<std::string> terms;
  std::string lhs = equation.substr(0, arrow) + ",";
  for (size_t b = 0, c; (c = lhs.find(',', b)) != std::string::npos; b = c + 1)
    terms.push_back(lhs.substr(b, c - b));
  std::map<char, int64_t> size;
  std::vector<std::vector<double>> values;
  for (size_t k = 0; k < terms.size(); ++k) {
    for (size_t d = 0; d < terms[k].size(); ++d)
      size[terms[k][d]] = operands[k].size(static_cast<int64_t>(d));
    values.push_back(operands[k].contiguous().to_vector<double>());
  }
  std::vector<char> labels;
  for (auto& [l, s] : size) labels.push_back(l);
  auto offset = [&](const std::string& term, const std::map<char, int64_t>& at) {
    int64_t o = 0;
    for (char l : term) o = o * size[l] + at.at(l);
    return o;
  };
  int64_t out_numel = 1;
  for (char l : out_term) out_numel *= size[l];
  std::vector<double> out(static_cast<size_t>(out_numel), 0.0);
  for (auto& [l, s] : size)
    if (s == 0) return out;  // an empty sum
  std::map<char, int64_t> at;
  for (char l : labels) at[l] = 0;
  for (;;) {
    double p = 1;
    for (size_t k = 0; k < terms.size(); ++k) p *= values[k][static_cast<size_t>(offset(terms[k], at))];
    out[static_cast<size_t>(offset(out_term, at))] += p;
    size_t i = 0;
    for (; i < labels.size(); ++i) {
      if (++at[labels[i]] < size[labels[i]]) break;
      at[labels[i]] = 0;
    }
    if (i == labels.size()) break;
  }
  return out;
}

Tensor operand(IntArrayRef shape, uint64_t seed) {
  return make(random_values(shape_numel(shape), seed), shape, kFloat64);
}

void check_einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  CAPTURE(equation);
  check_close(einsum(equation, operands), reference(equation, operands), Tol{1e-12, 1e-12});
}

}  // namespace

TEST_CASE("einsum matches the definition: products, contractions, batches, outer products, diagonals") {
  const Tensor a = operand({3, 4}, 1), b = operand({4, 5}, 2), c = operand({5, 2}, 3);
  check_einsum("ij,jk->ik", {a, b});
  check_einsum("ij,jk->ki", {a, b});
  check_einsum("ij,jk,kl->il", {a, b, c});
  check_einsum("ij,jk,kl->", {a, b, c});
  check_einsum("bij,bjk->bik", {operand({2, 3, 4}, 4), operand({2, 4, 5}, 5)});
  check_einsum("bij,bjk->bk", {operand({2, 3, 4}, 4), operand({2, 4, 5}, 5)});
  check_einsum("i,j->ij", {operand({3}, 6), operand({4}, 7)});
  check_einsum("i,i->", {operand({5}, 8), operand({5}, 9)});
  check_einsum("i,i->i", {operand({5}, 8), operand({5}, 9)});
  check_einsum("ij,ij->ij", {a, a.mul(2.0)});
  check_einsum("ij->ji", {a});
  check_einsum("ij->j", {a});
  check_einsum("ii->i", {operand({4, 4}, 10)});
  check_einsum("ii->", {operand({4, 4}, 10)});
  check_einsum("iij->ij", {operand({3, 3, 2}, 11)});
  check_einsum("bhqd,bhkd->bhqk", {operand({2, 3, 4, 5}, 12), operand({2, 3, 6, 5}, 13)});
  check_einsum("ijk,jil->kl", {operand({2, 3, 4}, 14), operand({3, 2, 5}, 15)});
  check_einsum("ab,cd->abcd", {operand({2, 3}, 16), operand({2, 2}, 17)});
  check_einsum(",i->i", {scalar_tensor(0.7, TensorOptions(kFloat64)), operand({3}, 19)});
  check_einsum("ij,jk->ik", {a.t().t(), b.t().contiguous().t()});         // non-contiguous operands
  check_einsum("ij,jk->ik", {operand({3, 0}, 20), operand({0, 2}, 21)});  // empty contraction: zeros
}

TEST_CASE("einsum: implicit outputs, '...', broadcasting, spaces and dtype promotion as torch") {
  const Tensor a = operand({3, 4}, 1), b = operand({4, 5}, 2);
  check_close(einsum("ij,jk", {a, b}), values(einsum("ij,jk->ik", {a, b})), Tol{0, 0});
  check_close(einsum(" i j , j k -> i k ", {a, b}), values(einsum("ij,jk->ik", {a, b})), Tol{0, 0});
  // Implicit output in ASCII order: upper case first (torch: einsum('bA', x) is [A, b]).
  CHECK(einsum("bA", {a}).sizes() == IntArrayRef{4, 3});
  CHECK(einsum("ii", {operand({3, 3}, 3)}).dim() == 0);  // the trace
  const Tensor x = operand({2, 3, 4, 5}, 4);
  check_close(einsum("...ij->...ji", {x}), values(einsum("abij->abji", {x})), Tol{0, 0});
  check_close(einsum("...ij->ij", {x}), values(einsum("abij->ij", {x})),
              Tol{1e-12, 1e-12});  // summed, as torch
  check_close(einsum("i...->...", {x}), values(einsum("iabc->abc", {x})), Tol{1e-12, 1e-12});
  // Broadcast batch dims: [2, 1] with [3] -> [2, 3].
  const Tensor p = operand({2, 1, 3, 4}, 5), q = operand({3, 4, 6}, 6);
  const Tensor want = einsum("abij,abjk->abik", {p.expand({2, 3, 3, 4}), q.expand({2, 3, 4, 6})});
  const Tensor got = einsum("...ij,...jk->...ik", {p, q});
  CHECK(got.sizes() == IntArrayRef{2, 3, 3, 6});
  check_close(got, values(want), Tol{1e-12, 1e-12});
  // float32 with float64 computes in float64 (torch promotes too).
  CHECK(einsum("i,j->ij", {operand({2}, 7).to(kFloat32), operand({3}, 8)}).dtype() == kFloat64);
  CHECK(einsum("ij,jk->ik", {a.to(kFloat32), b.to(kFloat32)}).dtype() == kFloat32);
}

TEST_CASE("einsum refuses malformed equations and mismatched operands, naming the problem") {
  const Tensor a = zeros({2, 3}), b = zeros({4, 2});
  CHECK(error_of([&] { einsum("ij,jk->ik", {a}); }).find("has 2 operand subscripts but 1 operands") !=
        std::string::npos);
  CHECK(
      error_of([&] {
        einsum("ij,jk", {a, b});
      }).find("subscript j has size 4 for operand 1 which does not broadcast with previously seen size 3") !=
      std::string::npos);
  CHECK(error_of([&] { einsum("ii->i", {a}); }).find("subscript i is repeated for operand 0 but the sizes") !=
        std::string::npos);
  CHECK(error_of([&] { einsum("ijk->i", {a}); }).find("operand 0 has 2 dims but its subscripts name 3") !=
        std::string::npos);
  CHECK(error_of([&] { einsum("i1->i", {a}); }).find("invalid subscript '1'") != std::string::npos);
  CHECK(error_of([&] { einsum("ij->ii", {a}); }).find("output subscript i appears more than once") !=
        std::string::npos);
  CHECK(error_of([&] { einsum("ij->k", {a}); }).find("output subscript k does not appear in any operand") !=
        std::string::npos);
  CHECK(error_of([&] { einsum("..ij->ij", {a}); }).find("malformed '...'") != std::string::npos);
  CHECK(error_of([&] { einsum("", {}); }).find("expected at least one operand") != std::string::npos);
}
