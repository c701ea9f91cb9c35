/*
 * A node of the backward graph: the gradient function of one recorded op (or a leaf's
 * gradient accumulator). Its edges point at the nodes that produced its forward inputs, so
 * the graph runs from the loss back to the leaves:
 *
 *    x (leaf) ──► AccumulateGrad ◄── MulBackward ◄── SumBackward ◄── loss.backward()
 *                                        ▲
 *    w (leaf) ──► AccumulateGrad ◄───────┘
 *
 * apply() takes one gradient per forward output and returns one per forward input (an
 * undefined tensor where an input needs none). Nodes are shared: every output tensor holds
 * its grad_fn, every consumer holds an edge to it; the graph dies with its last output.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/object_pool.h"
#include "core/tensor.h"

namespace loom::autograd {

class Node;

// Where a gradient goes: input `input_nr` of `node` (input_nr = the forward output index).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

// What a gradient must look like: the shape, dtype and device of a forward tensor.
struct TensorMeta {
  DimVector sizes;
  DType dtype = DType::Float32;
  Device device;
  // False for an output recorded only to be saved for backward (Save::saved_only_outputs): no
  // gradient flows into it, and the engine does not make zeros for it.
  bool differentiable = true;
  TensorMeta() = default;
  explicit TensorMeta(const Tensor& t) : sizes(t.sizes()), dtype(t.dtype()), device(t.device()) {}
};

using GradHook = std::function<Tensor(const Tensor&)>;

// Node-owned arrays come from the per-thread object pool too (core/object_pool.h): every
// recorded op makes a few of them.
template <class T>
using PoolVector = std::vector<T, PoolAllocator<T>>;

// Gradients flowing through a node: one per forward output in, one per forward input out.
using Grads = PoolVector<Tensor>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // "MulBackward0"-style name, shown in errors and graph dumps.
  virtual std::string name() const = 0;
  // grads: one per forward output (defined; zeros were filled in where none arrived).
  virtual Grads apply(Grads&& grads) = 0;
  // Drops saved tensors once backward has used them (unless retain_graph).
  virtual void release_saved() {}
  // The tensors it saved for backward (for memory accounting; empty once released).
  virtual void collect_saved(std::vector<Tensor>& out) const { (void)out; }
  // Moves the saved tensors out (used while freeing a graph, see ~Node).
  virtual void move_saved_out(std::vector<Tensor>& out) { (void)out; }

  const PoolVector<Edge>& next_edges() const { return next_edges_; }
  PoolVector<Edge>& mutable_next_edges() { return next_edges_; }
  const Edge& next_edge(size_t i) const { return next_edges_[i]; }
  size_t num_inputs() const { return next_edges_.size(); }  // forward inputs
  bool needs_input_grad(size_t i) const { return i < next_edges_.size() && next_edges_[i].valid(); }

  // Forward outputs (the gradients this node receives).
  const PoolVector<TensorMeta>& output_meta() const { return output_meta_; }
  void add_output_meta(const Tensor& t, bool differentiable = true) {
    output_meta_.push_back(t.defined() ? TensorMeta(t) : TensorMeta());
    output_meta_.back().differentiable = differentiable;
  }
  // Forward inputs (the gradients this node returns must match them).
  const PoolVector<TensorMeta>& input_meta() const { return input_meta_; }
  void add_input(Edge edge, const Tensor& input);
  void reserve(size_t inputs, size_t outputs) {
    next_edges_.reserve(inputs);
    input_meta_.reserve(inputs);
    output_meta_.reserve(outputs);
  }

  // Order of creation: among ready nodes the engine runs the newest first, so backward runs
  // in reverse forward order.
  uint64_t sequence_nr() const { return sequence_nr_; }
  void set_sequence_nr(uint64_t n) { sequence_nr_ = n; }

  // Tensor hooks of this node's forward outputs (non-leaf tensors): run on the gradient of
  // output `output_nr` before apply, in registration order; a defined result replaces it.
  uint64_t add_pre_hook(uint32_t output_nr, GradHook hook);
  bool remove_pre_hook(uint64_t handle);
  Tensor run_pre_hooks(uint32_t output_nr, Tensor grad) const;
  bool has_pre_hooks() const { return !pre_hooks_.empty(); }

 protected:
  // Releases what this node holds of the graph (edges, saved tensors' histories), putting the
  // nodes it was the last owner of on `stack` instead of freeing them recursively.
  void release_graph(std::vector<std::shared_ptr<Node>>& stack);

  PoolVector<Edge> next_edges_;
  PoolVector<TensorMeta> input_meta_;
  PoolVector<TensorMeta> output_meta_;

 private:
  struct PreHook {
    uint64_t handle;
    uint32_t output_nr;
    GradHook fn;
  };
  uint64_t sequence_nr_;
  std::vector<PreHook> pre_hooks_;
};

// A fresh handle for hooks (unique in the process).
uint64_t next_hook_handle();

}  // namespace loom::autograd
