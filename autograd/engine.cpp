/*
 * The engine (see engine.h). One backward call:
 *   1. count, for every node reachable from the outputs, how many edges point at it;
 *   2. put the output gradients into the root nodes' input buffers;
 *   3. repeatedly run a ready node (all its gradients have arrived; newest first): its hooks,
 *      its formula, then add each returned gradient into the buffer of the node it goes to
 *      and make that node ready once its count reaches zero.
 * Each node runs once, after all its consumers. Leaves are reached through AccumulateGrad.
 * For grad(), the gradients arriving at the inputs' nodes are captured instead, and only
 * the nodes on a path to them run (GradCapture, grad_capture.h). A split backward
 * (split_backward.h) is such a pass in which each node also skips, and leaves for later, its
 * inputs' gradients that lead to no captured node.
 */
#include "autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "autograd/autograd_meta.h"
#include "autograd/formulas/formulas.h"
#include "autograd/grad_capture.h"
#include "autograd/split_backward.h"
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

// The node now running in a split backward, and the inputs whose gradients it skips
// (input_grad_skipped); set around one apply() and restored after it (a formula may run a
// backward of its own, as checkpointing does).
struct SkippedInputs {
  const Node* node = nullptr;
  const std::vector<bool>* skipped = nullptr;
};
thread_local SkippedInputs t_skipped;

class SkipInputs {
 public:
  SkipInputs(const Node& node, const std::vector<bool>& skipped) : saved_(t_skipped) {
    t_skipped = {&node, &skipped};
  }
  ~SkipInputs() { t_skipped = saved_; }
  SkipInputs(const SkipInputs&) = delete;
  SkipInputs& operator=(const SkipInputs&) = delete;

 private:
  SkippedInputs saved_;
};

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
  // capture: grad()'s, or null for backward(). deferred (with capture): the first pass of a
  // split backward, which leaves there the gradients of the inputs that lead to no captured node.
  GraphTask(bool keep_graph, bool create_graph, GradCapture* capture, DeferredWeightGrads* deferred = nullptr)
      : keep_graph_(keep_graph), create_graph_(create_graph), capture_(capture), deferred_(deferred) {}

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
      const TensorMeta& m = node.output_meta()[i];
      if (grads[i].defined() || !m.differentiable) continue;
      grads[i] = zeros(m.sizes, TensorOptions(m.dtype).device(m.device));
    }
    const std::vector<bool> skipped = deferred_ ? defer_uncaptured_inputs(node, grads) : std::vector<bool>();
    SkipInputs skipping(node, skipped);
    Grads outputs = node.apply(std::move(grads));
    // A split backward keeps only what its second pass reads: the deferred nodes' saved tensors.
    if (!keep_graph_ || (deferred_ && skipped.empty())) node.release_saved();
    return outputs;
  }

  // The inputs of `node` whose gradients lead to no captured node: recorded in deferred_ with
  // the gradients the node received, and returned for the formula to skip.
  std::vector<bool> defer_uncaptured_inputs(Node& node, const Grads& grads) {
    std::vector<bool> owed(node.num_inputs(), false);
    bool any = false;
    for (size_t i = 0; i < node.num_inputs(); ++i) {
      const Edge& e = node.next_edge(i);
      owed[i] = e.valid() && !capture_->needed(e.node.get());
      any = any || owed[i];
    }
    if (!any) return {};
    deferred_->entries.push_back({node.shared_from_this(), grads, owed});
    return owed;
  }

  bool keep_graph_, create_graph_;
  std::unordered_map<Node*, NodeState, std::hash<Node*>, std::equal_to<Node*>,
                     PoolAllocator<std::pair<Node* const, NodeState>>>
      state_;
  GradCapture* capture_;
  DeferredWeightGrads* deferred_;
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

// grad() and grad_deferring_weights() (`fn` in errors): the pass with the gradients that arrive
// at `inputs` captured and returned.
std::vector<Tensor> captured_grads(const char* fn, const std::vector<Tensor>& outputs,
                                   const std::vector<Tensor>& inputs, const std::vector<Tensor>& grad_outputs,
                                   bool keep_graph, bool create_graph, bool allow_unused,
                                   DeferredWeightGrads* deferred) {
  AutocastExcludeGuard no_autocast;  // backward runs in the forward's dtypes, as torch's
  std::vector<Edge> roots;
  std::vector<Tensor> grads;
  make_roots(outputs, grad_outputs, roots, grads);
  GradCapture capture(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Edge edge = gradient_edge(inputs[i]);
    LOOM_CHECK(edge.valid(), fn, ": input ", i, " (shape ", inputs[i].sizes(), ") does not require grad");
    capture.capture(edge, i);
  }
  // With no inputs there is nothing to capture, and the pass runs as backward()'s does.
  GraphTask(keep_graph, create_graph, inputs.empty() ? nullptr : &capture, deferred).run(roots, grads);
  std::vector<Tensor> result = capture.result();
  for (size_t i = 0; i < result.size(); ++i) {
    LOOM_CHECK(result[i].defined() || allow_unused, fn, ": input ", i, " (shape ", inputs[i].sizes(),
               ") was not used to compute the outputs",
               deferred ? "" : "; pass allow_unused=true if that is expected");
  }
  return result;
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
  return captured_grads("autograd::grad", outputs, inputs, grad_outputs, retain_graph.value_or(create_graph),
                        create_graph, allow_unused, nullptr);
}

std::vector<Tensor> grad_deferring_weights(const std::vector<Tensor>& outputs,
                                           const std::vector<Tensor>& inputs,
                                           const std::vector<Tensor>& grad_outputs,
                                           DeferredWeightGrads& deferred) {
  LOOM_CHECK(!inputs.empty(),
             "autograd::grad_deferring_weights: no inputs; use backward() for the whole pass");
  // The graph stays: W runs the deferred nodes' formulas again, on their saved tensors.
  return captured_grads("autograd::grad_deferring_weights", outputs, inputs, grad_outputs, /*keep_graph=*/true,
                        /*create_graph=*/false, /*allow_unused=*/false, &deferred);
}

void run_deferred_weight_grads(DeferredWeightGrads& deferred) {
  AutocastExcludeGuard no_autocast;
  AutoGradMode mode(false);
  // Each deferred node's owed gradients (its formula with the others skipped), then one pass
  // from all of them together, so that a leaf reached from several nodes accumulates once.
  std::vector<Edge> roots;
  std::vector<Tensor> grads;
  for (DeferredWeightGrads::Entry& entry : deferred.entries) {
    Node& node = *entry.node;
    std::vector<bool> done_in_first_pass(entry.owed.size());
    for (size_t i = 0; i < entry.owed.size(); ++i) done_in_first_pass[i] = !entry.owed[i];
    Grads outputs;
    {
      SkipInputs skipping(node, done_in_first_pass);
      outputs = node.apply(std::move(entry.grads));
    }
    node.release_saved();
    for (size_t i = 0; i < entry.owed.size(); ++i) {
      if (!entry.owed[i] || i >= outputs.size() || !outputs[i].defined()) continue;
      roots.push_back(node.next_edge(i));
      grads.push_back(validate_grad(node, i, std::move(outputs[i])));
    }
  }
  deferred.entries.clear();
  if (!roots.empty()) GraphTask(/*keep_graph=*/false, /*create_graph=*/false, nullptr).run(roots, grads);
}

bool input_grad_skipped(const Node& node, size_t i) {
  return t_skipped.node == &node && i < t_skipped.skipped->size() && (*t_skipped.skipped)[i];
}

}  // namespace loom::autograd
