/* DeviceMesh (see mesh.h). */
#include "distributed/mesh.h"

#include <sstream>

#include "core/error.h"

namespace loom::distributed {

std::string MeshShape::to_string() const {
  std::ostringstream os;
  os << "dp " << dp << " x tp " << tp << " x pp " << pp;
  return os.str();
}

int DeviceMesh::rank_of(const MeshShape& s, const MeshCoord& c) { return (c.pp * s.dp + c.dp) * s.tp + c.tp; }

MeshCoord DeviceMesh::coord_of(const MeshShape& s, int rank) {
  return {.dp = (rank / s.tp) % s.dp, .tp = rank % s.tp, .pp = rank / (s.tp * s.dp)};
}

std::vector<std::vector<int>> DeviceMesh::groups_along(const MeshShape& s, char axis) {
  LOOM_CHECK(axis == 'd' || axis == 't' || axis == 'p', "DeviceMesh: axis must be 'd', 't' or 'p', got '", axis,
             "'");
  const int length = axis == 'd' ? s.dp : axis == 't' ? s.tp : s.pp;
  std::vector<std::vector<int>> groups;
  // One group per rank whose coordinate along `axis` is 0, in rank order.
  for (int r = 0; r < s.size(); ++r) {
    MeshCoord c = coord_of(s, r);
    int& along = axis == 'd' ? c.dp : axis == 't' ? c.tp : c.pp;
    if (along != 0) continue;
    std::vector<int> group;
    for (int i = 0; i < length; ++i) {
      along = i;
      group.push_back(rank_of(s, c));
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, MeshShape shape)
    : world_(std::move(world)), shape_(shape) {
  LOOM_CHECK(world_ != nullptr, "DeviceMesh: null world group");
  LOOM_CHECK(shape_.dp >= 1 && shape_.tp >= 1 && shape_.pp >= 1, "DeviceMesh: every degree must be at least 1, got ",
             shape_.to_string());
  LOOM_CHECK(shape_.size() == world_->size(), "DeviceMesh: ", shape_.to_string(), " = ", shape_.size(),
             " ranks, but the world has ", world_->size(), " (start mpirun -np ", shape_.size(),
             " or change the degrees)");
  coord_ = coord_of(shape_, world_->rank());
  // new_group is collective over the world: every rank creates every group of an axis, in the
  // same order, and keeps the one it belongs to (the others return null on it).
  auto build = [&](char axis) {
    std::shared_ptr<ProcessGroup> mine;
    for (const std::vector<int>& ranks : groups_along(shape_, axis)) {
      std::shared_ptr<ProcessGroup> group = world_->new_group(ranks);
      if (group) mine = std::move(group);
    }
    mine->set_label(axis == 't' ? "tensor" : axis == 'd' ? "data" : "pipeline");  // for traces
    return mine;
  };
  tp_group_ = build('t');
  dp_group_ = build('d');
  pp_group_ = build('p');
}

}  // namespace loom::distributed
