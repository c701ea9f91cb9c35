/* Graph walks for inspection (see graph.h). */
#include "autograd/graph.h"

#include <sstream>
#include <unordered_set>

#include "autograd/autograd_meta.h"

namespace loom::autograd {

namespace {
template <class Visit>
void walk(const std::vector<Tensor>& roots, const Visit& visit) {
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (const Tensor& r : roots)
    if (auto fn = r.grad_fn(); fn && seen.insert(fn.get()).second) stack.push_back(fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    visit(*n);
    for (const Edge& e : n->next_edges())
      if (e.valid() && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
}
}  // namespace

GraphStats graph_stats(const std::vector<Tensor>& roots) {
  GraphStats stats;
  std::unordered_set<const StorageImpl*> counted;
  std::vector<Tensor> saved;
  walk(roots, [&](const Node& n) {
    ++stats.nodes;
    saved.clear();
    n.collect_saved(saved);
    for (const Tensor& t : saved)
      if (counted.insert(t.storage().get()).second) stats.saved_bytes += t.storage()->nbytes();
  });
  return stats;
}

std::string graph_to_string(const std::vector<Tensor>& roots) {
  std::ostringstream out;
  walk(roots, [&](const Node& n) {
    out << n.name() << " <- [";
    bool first = true;
    for (const Edge& e : n.next_edges()) {
      out << (first ? "" : ", ") << (e.valid() ? e.node->name() : "none");
      first = false;
    }
    out << "]\n";
  });
  return out.str();
}

}  // namespace loom::autograd
