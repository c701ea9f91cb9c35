/*
 * DeviceMesh: the world of N = dp × tp × pp ranks arranged as a 3-D grid, and a process group
 * for every line of it. It is what hybrid (3-D) parallelism stands on: each rank takes part in
 * one data-parallel group (gradients are averaged over it), one tensor-parallel group (each
 * layer's activations are all-reduced in it) and one pipeline group (activations flow along it).
 *
 * The rank order is Megatron-LM's: tensor parallelism varies fastest, then data, then pipeline,
 *
 *     rank = (pp_index · dp + dp_index) · tp + tp_index
 *
 * so that the ranks of a tensor-parallel group, which communicate in every layer, are adjacent
 * (on one machine when ranks fill machines in order), and pipeline stages, which exchange only
 * activations at their boundaries, are the farthest apart. For 8 = dp 2 × tp 2 × pp 2:
 *
 *                 pipeline stage 0          pipeline stage 1
 *                 tp 0   tp 1               tp 0   tp 1
 *     dp 0      [  0      1  ]            [  4      5  ]
 *     dp 1      [  2      3  ]            [  6      7  ]
 *
 *     tensor groups {0,1} {2,3} {4,5} {6,7}; data groups {0,2} {1,3} {4,6} {5,7};
 *     pipeline groups {0,4} {1,5} {2,6} {3,7}
 */
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"

namespace loom::distributed {

struct MeshShape {
  int dp = 1, tp = 1, pp = 1;
  int size() const { return dp * tp * pp; }
  std::string to_string() const;  // "dp 2 x tp 2 x pp 2"
};

// Where one rank sits in the mesh.
struct MeshCoord {
  int dp = 0, tp = 0, pp = 0;
  bool operator==(const MeshCoord&) const = default;
};

class DeviceMesh {
 public:
  // Builds every data, tensor and pipeline group (collective over `world`: all ranks must call
  // it with the same shape). Throws loom::Error when a degree is below 1 or dp · tp · pp is not
  // the world's size, naming the shape and the size.
  DeviceMesh(std::shared_ptr<ProcessGroup> world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoord& coord() const { return coord_; }
  int rank() const { return world_->rank(); }

  // This rank's groups. Each holds the ranks that differ from this one only along that axis,
  // ordered by their index along it (so group rank == coordinate along the axis).
  ProcessGroup& data_group() const { return *dp_group_; }
  ProcessGroup& tensor_group() const { return *tp_group_; }
  ProcessGroup& pipeline_group() const { return *pp_group_; }
  std::shared_ptr<ProcessGroup> data_group_ptr() const { return dp_group_; }
  std::shared_ptr<ProcessGroup> tensor_group_ptr() const { return tp_group_; }
  std::shared_ptr<ProcessGroup> pipeline_group_ptr() const { return pp_group_; }
  ProcessGroup& world() const { return *world_; }

  // The world rank at a coordinate, and the coordinate of a world rank (the formula above).
  static int rank_of(const MeshShape& shape, const MeshCoord& coord);
  static MeshCoord coord_of(const MeshShape& shape, int rank);
  // The world ranks of every group along one axis ('d', 't' or 'p'), each in axis order: what
  // the constructor creates, and what the printout shows.
  static std::vector<std::vector<int>> groups_along(const MeshShape& shape, char axis);

 private:
  std::shared_ptr<ProcessGroup> world_;
  MeshShape shape_;
  MeshCoord coord_;
  std::shared_ptr<ProcessGroup> dp_group_, tp_group_, pp_group_;
};

}  // namespace loom::distributed
