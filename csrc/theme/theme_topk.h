// Running top-k of (score, id) with the library's order: score descending, then id
// ascending. Each thread keeps one TopK per query; merge_topk() combines them at the end.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace rasfast {
namespace theme {

struct Cand {
  float score;
  int64_t id;
};

// a ranks before b.
inline bool better(const Cand& a, const Cand& b) {
  return a.score > b.score || (a.score == b.score && a.id < b.id);
}

// Heap whose top is the worst kept candidate (std heap with `better` as "less").
class TopK {
 public:
  explicit TopK(int64_t k = 0) : k_(k) {}
  void reset(int64_t k) { k_ = k; heap_.clear(); }
  void push(float score, int64_t id) {
    const Cand c{score, id};
    if ((int64_t)heap_.size() < k_) {
      heap_.push_back(c);
      std::push_heap(heap_.begin(), heap_.end(), better);
    } else if (k_ > 0 && better(c, heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end(), better);
      heap_.back() = c;
      std::push_heap(heap_.begin(), heap_.end(), better);
    }
  }
  const std::vector<Cand>& items() const { return heap_; }

 private:
  int64_t k_;
  std::vector<Cand> heap_;
};

// Writes the best k of the union of `parts` to ids/scores, padding with -1 / -inf.
inline void merge_topk(const std::vector<const TopK*>& parts, int64_t k, int64_t* ids,
                       float* scores) {
  std::vector<Cand> all;
  for (const TopK* p : parts) all.insert(all.end(), p->items().begin(), p->items().end());
  const int64_t m = std::min<int64_t>(k, (int64_t)all.size());
  std::partial_sort(all.begin(), all.begin() + m, all.end(), better);
  for (int64_t j = 0; j < k; ++j) {
    ids[j] = j < m ? all[(size_t)j].id : -1;
    scores[j] = j < m ? all[(size_t)j].score : -std::numeric_limits<float>::infinity();
  }
}

}  // namespace theme
}  // namespace rasfast
