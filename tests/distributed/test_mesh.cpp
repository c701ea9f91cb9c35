/*
 * DeviceMesh: the rank <-> coordinate formula and the groups along each axis (checked against the
 * picture in distributed/mesh.h for 8 ranks), and, on the real world of 2 or 4 ranks, every
 * factorisation dp x tp x pp: each group has the right members in axis order, and an all-reduce in
 * a group sums exactly the ranks the formula puts in it.
 */
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "distributed/mesh.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/test_util.h"

namespace loom::distributed {
namespace {

using test::world;
using Groups = std::vector<std::vector<int>>;

TEST_CASE("mesh: the rank formula and the groups of dp 2 x tp 2 x pp 2 are the picture in mesh.h") {
  const MeshShape s{.dp = 2, .tp = 2, .pp = 2};
  CHECK(DeviceMesh::groups_along(s, 't') == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(DeviceMesh::groups_along(s, 'd') == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(DeviceMesh::groups_along(s, 'p') == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(DeviceMesh::coord_of(s, 6) == MeshCoord{.dp = 1, .tp = 0, .pp = 1});
  for (const MeshShape& shape : {MeshShape{3, 2, 4}, MeshShape{1, 8, 1}, MeshShape{5, 1, 3}})
    for (int r = 0; r < shape.size(); ++r) CHECK(DeviceMesh::rank_of(shape, DeviceMesh::coord_of(shape, r)) == r);
  CHECK(test::error_of([] { DeviceMesh::groups_along(MeshShape{}, 'x'); }).find("axis") != std::string::npos);
}

TEST_CASE("mesh: every factorisation of the world builds groups that reduce over exactly their members") {
  const int n = world()->size();
  for (int dp = 1; dp <= n; ++dp) {
    for (int tp = 1; tp <= n; ++tp) {
      if (n % (dp * tp) != 0) continue;
      const MeshShape shape{.dp = dp, .tp = tp, .pp = n / (dp * tp)};
      CAPTURE(shape.to_string());
      DeviceMesh mesh(world(), shape);
      const MeshCoord c = mesh.coord();
      CHECK(DeviceMesh::rank_of(shape, c) == world()->rank());
      CHECK(mesh.data_group().size() == shape.dp);
      CHECK(mesh.tensor_group().size() == shape.tp);
      CHECK(mesh.pipeline_group().size() == shape.pp);
      CHECK(mesh.data_group().rank() == c.dp);
      CHECK(mesh.tensor_group().rank() == c.tp);
      CHECK(mesh.pipeline_group().rank() == c.pp);
      // The sum of the world ranks in each of my groups, against the formula's member lists.
      for (char axis : {'d', 't', 'p'}) {
        ProcessGroup& group = axis == 'd' ? mesh.data_group() : axis == 't' ? mesh.tensor_group() : mesh.pipeline_group();
        Tensor mine = full({1}, static_cast<double>(world()->rank()));
        group.all_reduce(mine);
        int expected = -1;
        for (const std::vector<int>& members : DeviceMesh::groups_along(shape, axis))
          if (std::find(members.begin(), members.end(), world()->rank()) != members.end())
            expected = std::accumulate(members.begin(), members.end(), 0);
        CHECK(mine.item<double>() == expected);
      }
    }
  }
}

TEST_CASE("mesh: degrees that do not multiply to the world size are an error naming both") {
  const int n = world()->size();
  const std::string e = test::error_of([&] { DeviceMesh(world(), MeshShape{.dp = n, .tp = 2, .pp = 1}); });
  CHECK(e.find("dp " + std::to_string(n) + " x tp 2 x pp 1") != std::string::npos);
  CHECK(e.find("the world has " + std::to_string(n)) != std::string::npos);
  CHECK(test::error_of([&] { DeviceMesh(world(), MeshShape{.dp = 0, .tp = n, .pp = 1}); }).find("at least 1") !=
        std::string::npos);
}

}  // namespace
}  // namespace loom::distributed
