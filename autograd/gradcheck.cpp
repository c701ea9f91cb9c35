/*
 * gradcheck (see gradcheck.h). The numeric Jacobian perturbs one input element at a time in
 * place, writing through the element's address directly so that the storage version does not
 * change (the graph being checked may have saved that tensor). The analytic Jacobian is built
 * one output element at a time: autograd::grad with a one-hot output gradient gives a row.
 */
#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "ops/ops.h"

namespace loom::autograd {

namespace {

// Addresses of x's elements in row-major order.
std::vector<double*> element_addresses(const Tensor& x) {
  std::vector<double*> out(static_cast<size_t>(x.numel()));
  double* base = static_cast<double*>(x.data_ptr());
  DimVector index(x.sizes().size(), 0);
  for (size_t n = 0; n < out.size(); ++n) {
    int64_t offset = 0;
    for (size_t d = 0; d < index.size(); ++d) offset += index[d] * x.strides()[d];
    out[n] = base + offset;
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < x.sizes()[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

std::vector<Tensor> floating_outputs(const TensorFn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  for (Tensor& t : fn(inputs))
    if (t.defined() && is_floating(t.dtype())) out.push_back(std::move(t));
  return out;
}

std::vector<double> flat_values(const std::vector<Tensor>& outputs) {
  std::vector<double> v;
  for (const Tensor& t : outputs) {
    std::vector<double> part = t.to_vector<double>();
    v.insert(v.end(), part.begin(), part.end());
  }
  return v;
}

}  // namespace

GradcheckResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options) {
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    LOOM_CHECK(inputs[i].dtype() == DType::Float64, "gradcheck: input ", i, " must be float64 (got ",
               inputs[i].dtype(), "); finite differences in lower precision are too noisy");
    checked.push_back(i);
  }
  LOOM_CHECK(!checked.empty(), "gradcheck: no input requires grad");

  std::vector<Tensor> outputs = floating_outputs(fn, inputs);
  LOOM_CHECK(!outputs.empty(), "gradcheck: the function has no floating-point output");
  std::vector<size_t> output_offsets;
  size_t total_out = 0;
  for (const Tensor& o : outputs) {
    output_offsets.push_back(total_out);
    total_out += static_cast<size_t>(o.numel());
  }

  // Analytic Jacobian: analytic[k][j][e] = d out_j / d input_k[e].
  std::vector<Tensor> grad_inputs;
  for (size_t k : checked) grad_inputs.push_back(inputs[k]);
  std::vector<std::vector<std::vector<double>>> analytic(checked.size(), std::vector<std::vector<double>>(total_out));
  for (size_t o = 0; o < outputs.size(); ++o) {
    for (int64_t e = 0; e < outputs[o].numel(); ++e) {
      // Only outputs in the graph take part (one that does not require grad has zero rows).
      std::vector<Tensor> roots, grad_outputs;
      for (size_t p = 0; p < outputs.size(); ++p) {
        if (!outputs[p].requires_grad()) continue;
        Tensor g = zeros(outputs[p].sizes(), outputs[p].options());
        if (p == o) g.view({-1})[e].fill_(1.0);
        roots.push_back(outputs[p]);
        grad_outputs.push_back(g);
      }
      std::vector<Tensor> row = outputs[o].requires_grad()
                                    ? grad(roots, grad_inputs, grad_outputs, /*retain_graph=*/true,
                                           /*create_graph=*/false, /*allow_unused=*/true)
                                    : std::vector<Tensor>(checked.size());
      for (size_t k = 0; k < checked.size(); ++k)
        analytic[k][output_offsets[o] + static_cast<size_t>(e)] =
            row[k].defined() ? row[k].to_vector<double>() : std::vector<double>(inputs[checked[k]].numel(), 0.0);
    }
  }

  // Numeric Jacobian, column by column, compared as it is built. Grad mode stays on: for
  // gradgradcheck, fn itself runs a backward.
  for (size_t k = 0; k < checked.size(); ++k) {
    const Tensor& x = inputs[checked[k]];
    std::vector<double*> addresses = element_addresses(x);
    for (size_t e = 0; e < addresses.size(); ++e) {
      double original = *addresses[e];
      *addresses[e] = original + options.eps;
      std::vector<double> plus = flat_values(floating_outputs(fn, inputs));
      *addresses[e] = original - options.eps;
      std::vector<double> minus = flat_values(floating_outputs(fn, inputs));
      *addresses[e] = original;
      for (size_t j = 0; j < total_out; ++j) {
        double numeric = (plus[j] - minus[j]) / (2 * options.eps);
        double a = analytic[k][j][e];
        if (std::abs(a - numeric) > options.atol + options.rtol * std::abs(numeric) || std::isnan(a) != std::isnan(numeric)) {
          std::ostringstream msg;
          msg << "gradcheck: Jacobian mismatch for input " << checked[k] << " (shape " << x.sizes() << "), element "
              << e << ", output element " << j << ": analytic " << a << " vs numeric " << numeric;
          return {false, msg.str()};
        }
      }
    }
  }
  return {};
}

GradcheckResult gradgradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options) {
  std::vector<Tensor> outputs = floating_outputs(fn, inputs);
  std::vector<Tensor> vs;
  Generator gen(1234);
  for (const Tensor& o : outputs) {
    Tensor v = empty(o.sizes(), o.options());
    uniform_(v, -1.0, 1.0, &gen);
    vs.push_back(v);
  }
  std::vector<size_t> differentiable;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) differentiable.push_back(i);
  TensorFn first_derivative = [&](const std::vector<Tensor>& xs) {
    std::vector<Tensor> outs = floating_outputs(fn, xs), roots, grad_outputs;
    for (size_t p = 0; p < outs.size(); ++p)
      if (outs[p].requires_grad()) {
        roots.push_back(outs[p]);
        grad_outputs.push_back(vs[p]);
      }
    std::vector<Tensor> wrt;
    for (size_t i : differentiable) wrt.push_back(xs[i]);
    std::vector<Tensor> g = roots.empty() ? std::vector<Tensor>(wrt.size())
                                          : grad(roots, wrt, grad_outputs, /*retain_graph=*/true,
                                                 /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t i = 0; i < g.size(); ++i)
      if (!g[i].defined()) g[i] = zeros(wrt[i].sizes(), wrt[i].options());
    return g;
  };
  return gradcheck(first_derivative, inputs, options);
}

}  // namespace loom::autograd
