/*
 * The engine (see engine.h). One backward call:
 *   1. count, for every node reachable from the outputs, how many edges point at it;
 *   2. put the output gradients into the root nodes' input buffers;
 *   3. repeatedly run a ready node (all its gradients have arrived; newest first): its hooks,
 *      its formula, then add each returned gradient into the buffer of the node it goes to
 *      and make that node ready once its count reaches zero.
 * Each node runs once, after all its consumers. Leaves are reached through AccumulateGrad.
 * For grad(), the gradients arriving at the inputs' nodes are captured instead, and only
 * the nodes on a path to them run (GradCapture, grad_capture.h).
 */
#include "autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "autograd/autograd_meta.h"
#include "autograd/formulas/formulas.h"
#include "autograd/grad_capture.h"
#include "core/autocast.h"
#include "ops/ops.h"

namespace loom::autograd {

namespace {

// Brings a formula's gradient for input i to the input's shape, dtype and device.
Tensor validate_grad(const Node& node, size_t i, Tensor grad) {
  const TensorMeta& meta = node.input_meta()[i];
  if (grad.sizes() != IntArrayRef(meta.sizes)) {
    bool reducible = grad.dim() >= static_cast<int64_t>(meta.sizes.size());
    for (size_t k = 0; reducible && k < meta.sizes.size(); ++k) {
      int64_t g = grad.size(grad.dim() - static_cast<int64_t>(meta.sizes.size()) + static_cast<int64_t>(k));
      reducible = g == meta.sizes[k] || meta.sizes[k] == 1;
    }
    LOOM_CHECK(reducible, "autograd: ", node.name(), " returned a gradient of shape ", grad.sizes(),
               " for input ", i, " of shape ", IntArrayRef(meta.sizes));
    grad = sum_to(grad, meta.sizes);
  }
  if (grad.dtype() != meta.dtype) grad = grad.to(meta.dtype);
  if (grad.device() != meta.device) grad = grad.to(meta.device);
  return grad;
}

struct ReadyOrder {  // newest node first; accumulators (max sequence number) before all
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

class GraphTask {
  // Per node of the graph: edges not yet run, the gradients received so far, whether queued.
  struct NodeState {
    int dependencies = 0;
    bool queued = false;
    Grads buffer;
  };

 public:
  // capture: grad()'s, or null for backward().
  GraphTask(bool keep_graph, bool create_graph, GradCapture* capture)
      : keep_graph_(keep_graph), create_graph_(create_graph), capture_(capture) {}

  void run(const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads) {
    count_dependencies(roots);
    if (capture_) capture_->mark_needed(roots);
    ReadyQueue ready;
    for (size_t i = 0; i < roots.size(); ++i) add_grad(roots[i], root_grads[i]);
    for (const Edge& r : roots) make_ready_if_done(r.node.get(), state_[r.node.get()], ready);

    while (!ready.empty()) {
      Node* node = ready.top();
      ready.pop();
      Grads outputs = evaluate(*node);
      for (size_t i = 0; i < node->num_inputs(); ++i) {
        const Edge& next = node->next_edge(i);
        if (!next.valid()) continue;
        if (i < outputs.size() && outputs[i].defined()) add_grad(next, validate_grad(*node, i, std::move(outputs[i])));
        NodeState& s = state_[next.node.get()];
        --s.dependencies;
        make_ready_if_done(next.node.get(), s, ready);
      }
    }
  }

 private:
  using ReadyQueue = std::priority_queue<Node*, std::vector<Node*>, ReadyOrder>;

  void make_ready_if_done(Node* node, NodeState& s, ReadyQueue& ready) {
    if (s.dependencies == 0 && !s.queued) {
      s.queued = true;
      ready.push(node);
    }
  }

  void count_dependencies(const std::vector<Edge>& roots) {
    state_.reserve(1024);
    std::vector<Node*> stack;
    for (const Edge& r : roots)
      if (state_.try_emplace(r.node.get()).second) stack.push_back(r.node.get());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next_edges()) {
        if (!e.valid()) continue;
        auto [it, inserted] = state_.try_emplace(e.node.get());
        ++it->second.dependencies;
        if (inserted) stack.push_back(e.node.get());
      }
    }
  }

  void add_grad(const Edge& edge, Tensor grad) {
    Grads& buffer = state_[edge.node.get()].buffer;
    if (buffer.empty()) buffer.resize(edge.node->output_meta().size());
    Tensor& slot = buffer[edge.input_nr];
    // Out of place: the incoming gradient may alias tensors that others still read.
    slot = slot.defined() ? slot + grad : std::move(grad);
  }

  // Runs one node: its hooks, the captures, its formula. Returns the gradients for its inputs.
  Grads evaluate(Node& node) {
    Grads grads = std::move(state_[&node].buffer);
    grads.resize(node.output_meta().size());
    AutoGradMode mode(create_graph_);
    if (node.has_pre_hooks())
      for (size_t i = 0; i < grads.size(); ++i)
        if (grads[i].defined()) grads[i] = node.run_pre_hooks(static_cast<uint32_t>(i), std::move(grads[i]));

    if (capture_ && !capture_->take(node, grads)) return {};  // pruned, or a captured leaf

    bool any = false;
    for (const Tensor& g : grads) any = any || g.defined();
    if (!any) return {};  // nothing flows through this node
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined()) continue;
      const TensorMeta& m = node.output_meta()[i];
      grads[i] = zeros(m.sizes, TensorOptions(m.dtype).device(m.device));
    }
    Grads outputs = node.apply(std::move(grads));
    if (!keep_graph_) node.release_saved();
    return outputs;
  }

  bool keep_graph_, create_graph_;
  std::unordered_map<Node*, NodeState, std::hash<Node*>, std::equal_to<Node*>,
                     PoolAllocator<std::pair<Node* const, NodeState>>>
      state_;
  GradCapture* capture_;
};

// The root edges and their initial gradients (ones for one-element outputs).
void make_roots(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, std::vector<Edge>& roots,
                std::vector<Tensor>& grads) {
  LOOM_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "autograd: got ", outputs.size(),
             " outputs but ", grad_outputs.size(), " output gradients");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    LOOM_CHECK(out.defined(), "autograd: output ", i, " is undefined");
    Edge edge = gradient_edge(out);
    LOOM_CHECK(edge.valid(), "autograd: output ", i, " (shape ", out.sizes(),
               ") does not require grad and has no grad_fn; did you forget requires_grad_() on a leaf, or run "
               "the forward under NoGradGuard?");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      LOOM_CHECK(out.numel() == 1, "autograd: a gradient can be implicitly created only for one-element outputs; "
                 "output ", i, " has shape ", out.sizes(), ", pass its gradient to backward()");
      g = ones(out.sizes(), out.options());
    } else {
      LOOM_CHECK(g.sizes() == out.sizes(), "autograd: gradient of shape ", g.sizes(), " given for output ", i,
                 " of shape ", out.sizes());
    }
    roots.push_back(std::move(edge));
    grads.push_back(std::move(g));
  }
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              std::optional<bool> retain_graph, bool create_graph) {
  AutocastExcludeGuard no_autocast;  // backward runs in the forward's dtypes, as torch's
  std::vector<Edge> roots;
  std::vector<Tensor> grads;
  make_roots(outputs, grad_outputs, roots, grads);
  GraphTask(retain_graph.value_or(create_graph), create_graph, nullptr).run(roots, grads);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph,
                         bool create_graph, bool allow_unused) {
  AutocastExcludeGuard no_autocast;  // backward runs in the forward's dtypes, as torch's
  std::vector<Edge> roots;
  std::vector<Tensor> grads;
  make_roots(outputs, grad_outputs, roots, grads);
  GradCapture capture(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Edge edge = gradient_edge(inputs[i]);
    LOOM_CHECK(edge.valid(), "autograd::grad: input ", i, " (shape ", inputs[i].sizes(), ") does not require grad");
    capture.capture(edge, i);
  }
  // With no inputs there is nothing to capture, and the pass runs as backward()'s does.
  GraphTask(retain_graph.value_or(create_graph), create_graph, inputs.empty() ? nullptr : &capture).run(roots, grads);
  std::vector<Tensor> result = capture.result();
  for (size_t i = 0; i < result.size(); ++i) {
    LOOM_CHECK(result[i].defined() || allow_unused, "autograd::grad: input ", i, " (shape ", inputs[i].sizes(),
               ") was not used to compute the outputs; pass allow_unused=true if that is expected");
  }
  return result;
}

}  // namespace loom::autograd
