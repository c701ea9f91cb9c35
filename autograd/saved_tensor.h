/*
 * A tensor a node keeps for its backward (torch's SavedVariable). It remembers the storage
 * version at save time: if the data was modified in place since, unpacking throws — the
 * gradient would silently be wrong otherwise. A saved *output* of the node itself is kept
 * without its autograd state (the output's grad_fn is the node: keeping both would be a
 * reference cycle) and is given it back, through a weak link, when unpacked.
 */
#pragma once

#include <memory>

#include "autograd/node.h"

namespace loom::autograd {

class SavedTensor {
 public:
  SavedTensor() = default;
  // is_output: `t` is an output of `owner`, the node saving it.
  SavedTensor(const Tensor& t, bool is_output);

  // The saved tensor; throws if it was released (backward ran already without retain_graph)
  // or modified in place since it was saved. `owner` is the node that saved it.
  Tensor unpack(const Node& owner) const;
  void release();
  Tensor take() { return std::move(data_); }  // for freeing the graph
  bool defined() const { return was_defined_; }
  const Tensor& data() const { return data_; }  // without the checks (metadata, byte counts)

 private:
  Tensor data_;
  uint64_t saved_version_ = 0;
  uint32_t output_nr_ = 0;
  bool is_output_ = false;
  bool was_defined_ = false;
  bool released_ = false;
  std::weak_ptr<Node> grad_fn_;  // outputs: the owner, to restore the history on unpack
};

}  // namespace loom::autograd
