/*
 * einsum (ops/linalg.h), composed of views, sum and bmm, so that every device, autocast and
 * autograd take it as it is. The steps, as torch's (without its contraction-path optimiser):
 *   1. parse the equation into one list of labels per operand ("..." becomes as many broadcast
 *      labels as the operand has extra dims, right-aligned across operands) and the output's;
 *   2. per operand, take the diagonal of a repeated label (a strided view), and sum out the
 *      labels that neither the output nor any other operand has;
 *   3. contract left to right: a pair's shared labels that are still needed later are batch
 *      dims, the others are summed by the product; each pair is permuted to [batch, own, shared]
 *      x [batch, shared, other's own] and multiplied with one bmm;
 *   4. permute the result to the output's order.
 * Labels are numbered 0-51 for A-Z and a-z (ASCII order, which the implicit output follows, as
 * torch), and from 52 for the broadcast dims of "...".
 */
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "ops/linalg.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

constexpr int kLetters = 52;

struct Term {
  std::vector<int> labels;  // letters only, in order, with kEllipsis where "..." stands
  bool ellipsis = false;
};
constexpr int kEllipsis = -1;

int label_of(char c) {
  return c >= 'A' && c <= 'Z' ? c - 'A' : c - 'a' + 26;
}

char letter_of(int label) {
  return label < 26 ? static_cast<char>('A' + label) : static_cast<char>('a' + label - 26);
}

std::string label_name(int label) {
  return label < kLetters ? std::string(1, letter_of(label)) : "... dim " + std::to_string(label - kLetters);
}

Term parse_term(std::string_view text, std::string_view equation) {
  Term t;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      LOOM_CHECK(!t.ellipsis && text.substr(i, 3) == "...", "einsum: malformed '...' in equation '", equation,
                 "'");
      t.ellipsis = true;
      t.labels.push_back(kEllipsis);
      i += 2;
    } else {
      LOOM_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'), "einsum: invalid subscript '", c,
                 "' in equation '", equation, "' (expected letters, '...', ',' and '->')");
      t.labels.push_back(label_of(c));
    }
  }
  return t;
}

// The term's labels for an operand of `rank` dims, "..." replaced by the last `rank - letters`
// of the `ellipsis_dims` broadcast labels.
std::vector<int> expand_term(const Term& t, int64_t rank, int64_t ellipsis_dims) {
  const int64_t letters = static_cast<int64_t>(t.labels.size()) - (t.ellipsis ? 1 : 0);
  std::vector<int> out;
  for (int l : t.labels) {
    if (l != kEllipsis) {
      out.push_back(l);
      continue;
    }
    for (int64_t j = ellipsis_dims - (rank - letters); j < ellipsis_dims; ++j)
      out.push_back(kLetters + static_cast<int>(j));
  }
  return out;
}

struct Operand {
  Tensor t;
  std::vector<int> labels;  // one per dim of t
};

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Sums the dims of `op` whose labels `keep` rejects.
template <class Keep>
void sum_unneeded(Operand& op, const Keep& keep) {
  DimVector dims;
  std::vector<int> kept;
  for (size_t d = 0; d < op.labels.size(); ++d) {
    if (keep(op.labels[d]))
      kept.push_back(op.labels[d]);
    else
      dims.push_back(static_cast<int64_t>(d));
  }
  if (dims.empty()) return;
  op.t = sum(op.t, dims);
  op.labels = kept;
}

// A view of op with every repeated label reduced to its diagonal.
void take_diagonals(Operand& op, std::string_view equation, size_t index) {
  for (size_t i = 0; i < op.labels.size(); ++i) {
    for (size_t j = i + 1; j < op.labels.size();) {
      if (op.labels[j] != op.labels[i]) {
        ++j;
        continue;
      }
      const auto di = static_cast<int64_t>(i), dj = static_cast<int64_t>(j);
      LOOM_CHECK(op.t.size(di) == op.t.size(dj), "einsum: subscript ", label_name(op.labels[i]),
                 " is repeated for operand ", index, " but the sizes don't match, ", op.t.size(di),
                 " != ", op.t.size(dj), " (equation '", equation, "')");
      DimVector sizes(op.t.sizes()), strides(op.t.strides());
      strides[i] += strides[j];
      sizes.erase(j);
      strides.erase(j);
      op.t = as_strided(op.t, sizes, strides, op.t.storage_offset());
      op.labels.erase(op.labels.begin() + dj);
    }
  }
}

int64_t product(const Tensor& t, const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= t.size(d);
  return p;
}

// a * b summed over their shared labels that `needed` rejects; the others become batch dims.
Operand contract(Operand a, Operand b, const std::vector<int>& needed, std::string_view equation,
                 size_t index) {
  // Shared labels of size 1 on one side broadcast: expand that side first.
  for (size_t i = 0; i < a.labels.size(); ++i) {
    const auto it = std::find(b.labels.begin(), b.labels.end(), a.labels[i]);
    if (it == b.labels.end()) continue;
    const auto j = static_cast<int64_t>(it - b.labels.begin());
    const int64_t sa = a.t.size(static_cast<int64_t>(i)), sb = b.t.size(j);
    if (sa == sb) continue;
    LOOM_CHECK(sa == 1 || sb == 1, "einsum: subscript ", label_name(a.labels[i]), " has size ", sb,
               " for operand ", index, " which does not broadcast with previously seen size ", sa,
               " (equation '", equation, "')");
    if (sa == 1) {
      DimVector sizes(a.t.sizes());
      sizes[i] = sb;
      a.t = a.t.expand(sizes);
    } else {
      DimVector sizes(b.t.sizes());
      sizes[static_cast<size_t>(j)] = sa;
      b.t = b.t.expand(sizes);
    }
  }
  if (a.t.dtype() != b.t.dtype()) {  // as torch: the product is in the promoted dtype
    const DType common = promote_types(a.t.dtype(), b.t.dtype());
    a.t = a.t.to(common);
    b.t = b.t.to(common);
  }
  std::vector<int64_t> a_batch, a_own, a_shared, b_batch, b_shared, b_own;
  std::vector<int> batch_labels, a_labels, b_labels;
  for (size_t i = 0; i < a.labels.size(); ++i) {
    const int l = a.labels[i];
    const auto it = std::find(b.labels.begin(), b.labels.end(), l);
    if (it == b.labels.end()) {
      a_own.push_back(static_cast<int64_t>(i));
      a_labels.push_back(l);
    } else if (contains(needed, l)) {
      a_batch.push_back(static_cast<int64_t>(i));
      b_batch.push_back(it - b.labels.begin());
      batch_labels.push_back(l);
    } else {
      a_shared.push_back(static_cast<int64_t>(i));
      b_shared.push_back(it - b.labels.begin());
    }
  }
  for (size_t j = 0; j < b.labels.size(); ++j)
    if (!contains(a.labels, b.labels[j])) {
      b_own.push_back(static_cast<int64_t>(j));
      b_labels.push_back(b.labels[j]);
    }
  const int64_t batch = product(a.t, a_batch), m = product(a.t, a_own), k = product(a.t, a_shared),
                n = product(b.t, b_own);
  auto joined = [](std::initializer_list<const std::vector<int64_t>*> parts) {
    DimVector out;
    for (const auto* p : parts)
      for (int64_t d : *p) out.push_back(d);
    return out;
  };
  const Tensor lhs = reshape(permute(a.t, joined({&a_batch, &a_own, &a_shared})), {batch, m, k});
  const Tensor rhs = reshape(permute(b.t, joined({&b_batch, &b_shared, &b_own})), {batch, k, n});
  DimVector out_sizes;
  for (int64_t d : a_batch) out_sizes.push_back(a.t.size(d));
  for (int64_t d : a_own) out_sizes.push_back(a.t.size(d));
  for (int64_t d : b_own) out_sizes.push_back(b.t.size(d));
  Operand out{reshape(bmm(lhs, rhs), out_sizes), batch_labels};
  out.labels.insert(out.labels.end(), a_labels.begin(), a_labels.end());
  out.labels.insert(out.labels.end(), b_labels.begin(), b_labels.end());
  return out;
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  LOOM_CHECK(!operands.empty(), "einsum: expected at least one operand for equation '", equation, "'");
  const size_t arrow = eq.find("->");
  const std::string_view lhs = std::string_view(eq).substr(0, arrow);
  std::vector<Term> terms;
  for (size_t begin = 0;;) {
    const size_t comma = lhs.find(',', begin);
    terms.push_back(
        parse_term(lhs.substr(begin, comma == std::string_view::npos ? comma : comma - begin), equation));
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  LOOM_CHECK(terms.size() == operands.size(), "einsum: equation '", equation, "' has ", terms.size(),
             " operand subscripts but ", operands.size(), " operands were given");
  // How many dims "..." stands for: the most any operand gives it.
  int64_t ellipsis_dims = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    check_defined(operands[i], "einsum", "operand");
    const int64_t letters = static_cast<int64_t>(terms[i].labels.size()) - (terms[i].ellipsis ? 1 : 0);
    const int64_t rank = operands[i].dim();
    LOOM_CHECK(terms[i].ellipsis ? rank >= letters : rank == letters, "einsum: operand ", i, " has ", rank,
               " dims but its subscripts name ", letters, terms[i].ellipsis ? " or more" : "", " (equation '",
               equation, "')");
    ellipsis_dims = std::max(ellipsis_dims, terms[i].ellipsis ? rank - letters : 0);
  }
  std::vector<Operand> ops;
  std::vector<int> count(static_cast<size_t>(kLetters + ellipsis_dims), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    ops.push_back({operands[i], expand_term(terms[i], operands[i].dim(), ellipsis_dims)});
    for (int l : ops.back().labels) ++count[static_cast<size_t>(l)];
  }
  // The output: given, or the broadcast dims and then the letters that appear once (ASCII order).
  std::vector<int> output;
  if (arrow != std::string::npos) {
    const Term out = parse_term(std::string_view(eq).substr(arrow + 2), equation);
    for (int l : out.labels) {
      if (l == kEllipsis) {
        for (int64_t j = 0; j < ellipsis_dims; ++j) output.push_back(kLetters + static_cast<int>(j));
        continue;
      }
      LOOM_CHECK(!contains(output, l), "einsum: output subscript ", letter_of(l),
                 " appears more than once (equation '", equation, "')");
      LOOM_CHECK(count[static_cast<size_t>(l)] > 0, "einsum: output subscript ", letter_of(l),
                 " does not appear in any operand (equation '", equation, "')");
      output.push_back(l);
    }
  } else {
    for (int64_t j = 0; j < ellipsis_dims; ++j) output.push_back(kLetters + static_cast<int>(j));
    for (int l = 0; l < kLetters; ++l)
      if (count[static_cast<size_t>(l)] == 1) output.push_back(l);
  }
  for (size_t i = 0; i < ops.size(); ++i) take_diagonals(ops[i], equation, i);
  // Labels still needed after operand i: the output's and those of operands after i.
  auto needed_after = [&](size_t i) {
    std::vector<int> needed = output;
    for (size_t j = i + 1; j < ops.size(); ++j)
      needed.insert(needed.end(), ops[j].labels.begin(), ops[j].labels.end());
    return needed;
  };
  // Labels only one operand has and the output does not are summed before any product.
  for (size_t i = 0; i < ops.size(); ++i) {
    sum_unneeded(ops[i], [&](int l) {
      if (contains(output, l)) return true;
      for (size_t j = 0; j < ops.size(); ++j)
        if (j != i && contains(ops[j].labels, l)) return true;
      return false;
    });
  }
  Operand result = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    const std::vector<int> needed = needed_after(i);
    sum_unneeded(result, [&](int l) { return contains(needed, l) || contains(ops[i].labels, l); });
    result = contract(result, ops[i], needed, equation, i);
  }
  sum_unneeded(result, [&](int l) { return contains(output, l); });
  DimVector order;
  for (int l : output) {
    const auto it = std::find(result.labels.begin(), result.labels.end(), l);
    order.push_back(it - result.labels.begin());
  }
  return permute(result.t, order);
}

}  // namespace loom
