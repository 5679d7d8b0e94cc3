#include "prune/plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace tf {

namespace {

enum class UnitKind : uint8_t { HeadSlice, HeadGroup, Channel };

struct Unit {
  int32_t layer = 0;
  UnitKind kind = UnitKind::Channel;
  std::vector<int32_t> heads;  // query heads it removes
  int32_t kv_head = -1;        // HeadGroup: the KV head it removes
  int32_t channel = -1;        // Channel
  double score = 0;            // summed over what it removes
  int64_t params = 0;
  double key = 0;              // ranking key, ascending = removed first
};

std::vector<int32_t> iota_vec(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Indices of `scores` in ascending score order (ties: lower index first).
std::vector<int32_t> ascending(const std::vector<double>& scores, const std::vector<int32_t>& among) {
  std::vector<int32_t> v = among;
  std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) { return scores[size_t(a)] < scores[size_t(b)]; });
  return v;
}

// The head units of layer il, in the order they may go.
std::vector<Unit> head_units(const PruneShapes& s, const LayerScores& sc, int32_t il) {
  const LayerShape& l = s.layers[size_t(il)];
  const int64_t qpg = l.n_heads / l.n_kv_heads;
  std::vector<Unit> out;
  if (qpg == 1) {
    for (int32_t h : ascending(sc.heads, iota_vec(l.n_heads)))
      out.push_back(Unit{.layer = il, .kind = UnitKind::HeadGroup, .heads = {h}, .kv_head = h,
                         .score = sc.heads[size_t(h)], .params = 4 * s.head_dim * s.d_model});
    return out;
  }
  std::vector<std::vector<int32_t>> sorted;  // per group, its heads ascending
  for (int64_t g = 0; g < l.n_kv_heads; ++g) {
    std::vector<int32_t> members(static_cast<size_t>(qpg));
    std::iota(members.begin(), members.end(), int32_t(g * qpg));
    sorted.push_back(ascending(sc.heads, members));
  }
  for (int64_t t = 0; t + 1 < qpg; ++t) {  // each group keeps at least one
    Unit u{.layer = il, .kind = UnitKind::HeadSlice, .params = l.n_kv_heads * 2 * s.head_dim * s.d_model};
    for (const auto& g : sorted) {
      u.heads.push_back(g[size_t(t)]);
      u.score += sc.heads[size_t(g[size_t(t)])];
    }
    out.push_back(std::move(u));
  }
  return out;
}

std::vector<Unit> channel_units(const PruneShapes& s, const LayerScores& sc, int32_t il) {
  std::vector<Unit> out;
  for (int32_t c : ascending(sc.channels, iota_vec(s.layers[size_t(il)].d_ff)))
    out.push_back(Unit{.layer = il, .kind = UnitKind::Channel, .channel = c, .score = sc.channels[size_t(c)],
                       .params = 3 * s.d_model});
  return out;
}

// Units of one type scaled so their mean score per `measure` is 1.
void set_keys(std::vector<Unit>& units, double (*measure)(const Unit&)) {
  double sum = 0;
  for (const Unit& u : units) sum += u.score / measure(u);
  const double mean = units.empty() ? 1 : sum / double(units.size());
  for (Unit& u : units) u.key = (u.score / measure(u)) / (mean > 0 ? mean : 1);
}

double n_heads_of(const Unit& u) { return double(u.heads.size()); }
double one(const Unit&) { return 1; }
double params_of(const Unit& u) { return double(u.params); }

struct LayerState {
  int64_t heads_left = 0, channels_left = 0, min_heads = 0, min_channels = 0;
  std::vector<bool> head_gone, kv_gone, channel_gone;
};

// Takes units in ascending key order while `amount(u)` fits in what is left of `budget`.
void take(std::vector<Unit> units, double budget, double (*amount)(const Unit&), std::vector<LayerState>& st) {
  std::stable_sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) { return a.key < b.key; });
  // A layer's units go in their own order: once one is skipped for its layer's minimum, the
  // later ones of that layer and kind stay too.
  std::vector<std::array<bool, 3>> closed(st.size(), {false, false, false});
  double used = 0;
  for (const Unit& u : units) {
    LayerState& l = st[size_t(u.layer)];
    bool& shut = closed[size_t(u.layer)][size_t(u.kind)];
    if (shut) continue;
    const bool head = u.kind != UnitKind::Channel;
    if (head ? l.heads_left - int64_t(u.heads.size()) < l.min_heads : l.channels_left - 1 < l.min_channels) {
      shut = true;
      continue;
    }
    if (used + amount(u) > budget + 1e-9) {
      shut = true;  // a later unit of this layer is larger in key, not smaller in amount: keep order
      continue;
    }
    used += amount(u);
    if (head) {
      for (int32_t h : u.heads) l.head_gone[size_t(h)] = true;
      if (u.kv_head >= 0) l.kv_gone[size_t(u.kv_head)] = true;
      l.heads_left -= int64_t(u.heads.size());
    } else {
      l.channel_gone[size_t(u.channel)] = true;
      --l.channels_left;
    }
  }
}

void check_pct(double v, const char* what) {
  if (!(v >= 0 && v < 100)) fail("{}: {} is not a percentage in [0, 100)", what, v);
}

}  // namespace

std::vector<LayerKeep> keep_all(const PruneShapes& shapes) {
  std::vector<LayerKeep> out;
  for (const LayerShape& l : shapes.layers)
    out.push_back({.heads = iota_vec(l.n_heads), .kv_heads = iota_vec(l.n_kv_heads), .channels = iota_vec(l.d_ff)});
  return out;
}

void check_plan_target(const PlanTarget& t) {
  check_pct(t.heads_pct, "--heads");
  check_pct(t.ffn_pct, "--ffn");
  check_pct(t.params_pct, "--target-params");
  check_pct(t.min_keep_pct, "--min-keep");
  if (t.params_pct > 0 && (t.heads_pct > 0 || t.ffn_pct > 0))
    fail("--target-params splits the cut between heads and channels itself: give it alone, not with --heads or --ffn");
  if (t.channel_multiple < 1) fail("--channel-multiple must be at least 1, got {}", t.channel_multiple);
}

std::vector<LayerKeep> plan_pruning(const PruneShapes& s, const std::vector<LayerScores>& scores, const PlanTarget& t) {
  check_plan_target(t);
  TF_ASSERT(scores.size() == s.layers.size(), "plan_pruning: {} layers of scores for {} layers", scores.size(),
            s.layers.size());
  std::vector<LayerState> st;
  std::vector<Unit> heads, channels;
  int64_t total_heads = 0, total_channels = 0;
  for (size_t il = 0; il < s.layers.size(); ++il) {
    const LayerShape& l = s.layers[il];
    TF_ASSERT(l.n_kv_heads > 0 && l.n_heads % l.n_kv_heads == 0, "plan_pruning: layer {} has {} heads for {} KV heads",
              il, l.n_heads, l.n_kv_heads);
    TF_ASSERT(scores[il].heads.size() == size_t(l.n_heads) && scores[il].channels.size() == size_t(l.d_ff),
              "plan_pruning: layer {} scores do not match its shape", il);
    const int64_t qpg = l.n_heads / l.n_kv_heads;
    // Heads kept at least: min_keep_pct of them in whole slices (one per group at least), or
    // whole groups for multi-head attention.
    const int64_t unit = qpg == 1 ? 1 : l.n_kv_heads;
    const int64_t min_heads = std::max<int64_t>(unit, int64_t(std::ceil(t.min_keep_pct / 100 * double(l.n_heads) / double(unit))) * unit);
    const int64_t min_channels = std::max<int64_t>(1, int64_t(std::ceil(t.min_keep_pct / 100 * double(l.d_ff))));
    st.push_back(LayerState{.heads_left = l.n_heads, .channels_left = l.d_ff, .min_heads = min_heads,
                            .min_channels = min_channels, .head_gone = std::vector<bool>(size_t(l.n_heads)),
                            .kv_gone = std::vector<bool>(size_t(l.n_kv_heads)),
                            .channel_gone = std::vector<bool>(size_t(l.d_ff))});
    for (Unit& u : head_units(s, scores[il], int32_t(il))) heads.push_back(std::move(u));
    for (Unit& u : channel_units(s, scores[il], int32_t(il))) channels.push_back(std::move(u));
    total_heads += l.n_heads;
    total_channels += l.d_ff;
  }
  if (t.params_pct > 0) {
    set_keys(heads, params_of);
    set_keys(channels, params_of);
    std::vector<Unit> all = std::move(heads);
    all.insert(all.end(), channels.begin(), channels.end());
    take(std::move(all), t.params_pct / 100 * double(s.n_layer_params), params_of, st);
  } else {
    set_keys(heads, n_heads_of);
    set_keys(channels, one);
    if (t.heads_pct > 0) take(std::move(heads), std::round(t.heads_pct / 100 * double(total_heads)), n_heads_of, st);
    if (t.ffn_pct > 0) take(std::move(channels), std::round(t.ffn_pct / 100 * double(total_channels)), one, st);
  }
  std::vector<LayerKeep> out;
  for (size_t il = 0; il < s.layers.size(); ++il) {
    LayerState& l = st[il];
    // Round kept channels up to a multiple: the most important removed ones come back.
    const int64_t d_ff = s.layers[il].d_ff;
    const int64_t want = std::min(d_ff, (l.channels_left + t.channel_multiple - 1) / t.channel_multiple * t.channel_multiple);
    std::vector<int32_t> order = ascending(scores[il].channels, iota_vec(d_ff));
    for (auto it = order.rbegin(); it != order.rend() && l.channels_left < want; ++it)
      if (l.channel_gone[size_t(*it)]) {
        l.channel_gone[size_t(*it)] = false;
        ++l.channels_left;
      }
    LayerKeep k;
    for (int32_t h = 0; h < int32_t(l.head_gone.size()); ++h)
      if (!l.head_gone[size_t(h)]) k.heads.push_back(h);
    for (int32_t h = 0; h < int32_t(l.kv_gone.size()); ++h)
      if (!l.kv_gone[size_t(h)]) k.kv_heads.push_back(h);
    for (int32_t c = 0; c < int32_t(d_ff); ++c)
      if (!l.channel_gone[size_t(c)]) k.channels.push_back(c);
    out.push_back(std::move(k));
  }
  return out;
}

std::vector<LayerKeep> keep_of_cuts(const PruneShapes& s, const std::vector<LayerScores>& scores,
                                    const std::vector<LayerCut>& cuts) {
  TF_ASSERT(scores.size() == s.layers.size() && cuts.size() == s.layers.size(),
            "keep_of_cuts: {} layers of scores and {} of cuts for {} layers", scores.size(), cuts.size(),
            s.layers.size());
  std::vector<LayerKeep> out;
  for (size_t il = 0; il < s.layers.size(); ++il) {
    const LayerShape& l = s.layers[il];
    const std::vector<Unit> units = head_units(s, scores[il], int32_t(il));
    TF_ASSERT(cuts[il].head_units >= 0 && cuts[il].head_units <= int64_t(units.size()) && cuts[il].channels >= 0 &&
                  cuts[il].channels < l.d_ff,
              "keep_of_cuts: layer {} cannot lose {} head units and {} channels", il, cuts[il].head_units,
              cuts[il].channels);
    std::vector<bool> head_gone(size_t(l.n_heads)), kv_gone(size_t(l.n_kv_heads)), channel_gone(size_t(l.d_ff));
    for (int64_t u = 0; u < cuts[il].head_units; ++u) {
      for (int32_t h : units[size_t(u)].heads) head_gone[size_t(h)] = true;
      if (units[size_t(u)].kv_head >= 0) kv_gone[size_t(units[size_t(u)].kv_head)] = true;
    }
    const std::vector<int32_t> order = ascending(scores[il].channels, iota_vec(l.d_ff));
    for (int64_t c = 0; c < cuts[il].channels; ++c) channel_gone[size_t(order[size_t(c)])] = true;
    LayerKeep k;
    for (int32_t h = 0; h < int32_t(l.n_heads); ++h)
      if (!head_gone[size_t(h)]) k.heads.push_back(h);
    for (int32_t h = 0; h < int32_t(l.n_kv_heads); ++h)
      if (!kv_gone[size_t(h)]) k.kv_heads.push_back(h);
    for (int32_t c = 0; c < int32_t(l.d_ff); ++c)
      if (!channel_gone[size_t(c)]) k.channels.push_back(c);
    out.push_back(std::move(k));
  }
  return out;
}

int64_t removed_params(const PruneShapes& s, const std::vector<LayerKeep>& keep) {
  int64_t n = 0;
  const int64_t hd = s.head_dim, d = s.d_model;
  for (size_t il = 0; il < s.layers.size(); ++il) {
    const LayerShape& l = s.layers[il];
    n += (l.n_heads - int64_t(keep[il].heads.size())) * 2 * hd * d;
    n += (l.n_kv_heads - int64_t(keep[il].kv_heads.size())) * 2 * hd * d;
    n += (l.d_ff - int64_t(keep[il].channels.size())) * 3 * d;
  }
  return n;
}

}  // namespace tf
