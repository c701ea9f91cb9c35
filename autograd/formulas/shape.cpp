/*
 * Gradients of the shape ops: each output element's gradient goes back to the input element
 * it was copied from. The index ops are each other's adjoints (index_select <-> index_add,
 * gather <-> scatter_add), so their gradients are written with one another and can be
 * differentiated again; index tensors get no gradient. Reflect padding is the one gradient
 * that needs a backward kernel (pad_backward), whose own gradient is pad again.
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

namespace {

// cat's legacy placeholder (a 1-D tensor of size 0), which cat skips whatever its shape.
bool is_legacy_empty(IntArrayRef sizes) { return sizes.size() == 1 && sizes[0] == 0; }

// g, gathered at index's shape, zero-padded to src's larger shape where index is smaller
// (scatter_add reads only src's elements that index covers).
Tensor pad_to(const Tensor& g, IntArrayRef sizes) {
  if (g.sizes() == sizes || sizes.size() != static_cast<size_t>(g.dim())) return g;
  DimVector pads;
  for (size_t p = sizes.size(); p-- > 0;) {
    pads.push_back(0);
    pads.push_back(sizes[p] - g.size(static_cast<int64_t>(p)));
  }
  return pad(g, pads);
}

}  // namespace

void register_shape_formulas() {
  // Input i's gradient is its slab of g along dim.
  define_formula<Op::cat>(Save{}, [](const GradContext<DimAttrs>& c, const Grads& g) {
    const int64_t d = c.attrs().dim;
    Grads out(c.num_inputs());
    int64_t offset = 0;
    for (size_t i = 0; i < c.num_inputs(); ++i) {
      IntArrayRef sizes = c.input_sizes(i);
      if (is_legacy_empty(sizes)) {
        if (c.needs_grad(i)) out[i] = zeros(sizes, g[0].options());
        continue;
      }
      const int64_t size = sizes[static_cast<size_t>(d)];
      if (c.needs_grad(i)) out[i] = g[0].slice(d, offset, offset + size);
      offset += size;
    }
    return out;
  });
  // inputs (x, index): rows index[k] of x were read into row k.
  define_formula<Op::index_select>(Save{.inputs = 0b10}, [](const GradContext<DimAttrs>& c, const Grads& g) {
    return Grads{if_needed(c.needs_grad(0), [&] {
                   return index_add(zeros(c.input_sizes(0), g[0].options()), c.attrs().dim, c.input(1), g[0]);
                 }),
                 Tensor()};
  });
  // inputs (x, index, src): out = x + src's rows added at rows index[k].
  define_formula<Op::index_add>(Save{.inputs = 0b10}, [](const GradContext<DimAttrs>& c, const Grads& g) {
    return Grads{if_needed(c.needs_grad(0), [&] { return g[0]; }), Tensor(),
                 if_needed(c.needs_grad(2), [&] { return g[0].index_select(c.attrs().dim, c.input(1)); })};
  });
  // inputs (x, index): out[.., k, ..] = x[.., index[.., k, ..], ..] along dim.
  define_formula<Op::gather>(Save{.inputs = 0b10}, [](const GradContext<DimAttrs>& c, const Grads& g) {
    return Grads{if_needed(c.needs_grad(0), [&] {
                   return scatter_add(zeros(c.input_sizes(0), g[0].options()), c.attrs().dim, c.input(1), g[0]);
                 }),
                 Tensor()};
  });
  // inputs (x, index, src): src elements covered by index were added at index along dim.
  define_formula<Op::scatter_add>(Save{.inputs = 0b10}, [](const GradContext<DimAttrs>& c, const Grads& g) {
    return Grads{if_needed(c.needs_grad(0), [&] { return g[0]; }), Tensor(), if_needed(c.needs_grad(2), [&] {
                   return pad_to(g[0].gather(c.attrs().dim, c.input(1)), c.input_sizes(2));
                 })};
  });
  define_formula<Op::tril>(Save{}, [](const GradContext<TriangleAttrs>& c, const Grads& g) {
    return Grads{g[0].tril(c.attrs().diagonal)};
  });
  define_formula<Op::triu>(Save{}, [](const GradContext<TriangleAttrs>& c, const Grads& g) {
    return Grads{g[0].triu(c.attrs().diagonal)};
  });
  define_formula<Op::flip>(Save{}, [](const GradContext<DimsAttrs>& c, const Grads& g) {
    return Grads{g[0].flip(c.attrs().dims)};
  });
  // Constant padding is the adjoint of padding by the negated pads (the padding is cropped
  // off, cropped borders come back as zeros). Reflect, replicate and circular padding also add
  // the gradients of the elements read again back into the elements read (pad_backward).
  define_formula<Op::pad>(Save{}, [](const GradContext<PadAttrs>& c, const Grads& g) {
    const PadAttrs& a = c.attrs();
    if (a.mode != PadMode::Constant)
      return Grads{pad_backward(g[0], c.input_sizes(0), a.pads, pad_mode_name(a.mode))};
    DimVector negated(a.pads);
    for (int64_t& p : negated) p = -p;
    return Grads{pad(g[0], negated)};
  });
  // pad_backward is the adjoint of pad with the same pads and mode (zeros in the border).
  define_formula<Op::pad_backward>(Save{}, [](const GradContext<PadAttrs>& c, const Grads& g) {
    const PadAttrs& a = c.attrs();
    return Grads{pad(g[0], a.pads, pad_mode_name(a.mode), 0.0)};
  });
}

}  // namespace loom::autograd
