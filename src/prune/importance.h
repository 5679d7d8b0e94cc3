// Importance of the input columns of a projection (o_proj: one column per query-head
// dimension; down_proj: one per FFN channel), from the projection's weight and its input
// rows on calibration text. No gradients: both scores read only activations and weights.
//
//   Wanda (Sun et al. 2023, structured as in FLAP's comparisons): column j scores
//     sum_i |W[i, j]| * ||X[:, j]||_2,
//   the weight magnitudes of the column scaled by the size of the input that feeds it.
//   FLAP's fluctuation metric (An et al. 2024, "WIFV"): column j scores
//     var(X[:, j]) * ||W[:, j]||_2^2,
//   how much the column's output moves around its mean over the calibration rows; what stays
//   constant is what bias compensation (recover.h) restores when the column goes.
//
// A head scores the sum of its head_dim columns; a channel its one column.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace tf {

enum class PruneScore : uint8_t { Wanda, Flap };
std::string_view prune_score_name(PruneScore s);  // "wanda", "flap"
// "wanda" / "flap"; throws tf::Error naming `flag` otherwise.
PruneScore parse_prune_score(std::string_view name, std::string_view flag);

// Per column of w [m, k] (row-major, out x in) given rows x [n, k]: the score above. [k]
std::vector<double> column_scores(PruneScore s, const float* w, int64_t m, int64_t k, const float* x, int64_t n);

// Consecutive groups of `group` columns summed: [k / group].
std::vector<double> group_sums(const std::vector<double>& cols, int64_t group);

}  // namespace tf
