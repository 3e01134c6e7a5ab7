// TripleGraph merge: new triples into an existing triple adjacency (CSR), and the block
// concatenation a saved, grown knowledge index is loaded with.
//
// triple_graph_merge gives exactly what triple_graph_build gives on the old input followed by
// the new one (tests/test_triple_graph_merge.py checks it bit for bit), without rebuilding:
//
// - New triples get ids n_old.. in order; their entities were mapped to ids by the caller
//   (old entities keep theirs, new ones follow in first-appearance order), so every id that
//   a new triple adds is >= n_old and larger than every old id. Hence an OLD row's new
//   neighbours are all > its old ones: the new row is its old row copied, then the (sorted,
//   deduplicated) new triples of its two entities appended. No row is re-sorted.
// - A NEW row is built like in the builder: the union of the sorted member lists of its two
//   entities (old members then new ones, already ascending), minus itself. Member lists are
//   collected only for entities that the new triples mention (one scan of the old head/tail
//   arrays, 16 bytes per old triple; no hashing, no sort of old data).
// - Hub guard (max_degree): degrees only grow, so an entity can only STOP linking. An old row
//   with such an entity keeps the old neighbours that share a still-linking entity with it
//   (a filter of its old row); this touches at most max_degree rows per such entity.
//
// Cost: O(old nnz + old triples) for the copy into the new arrays (memcpy per row) plus
// O(sum over new triples of their entities' degrees) for the new entries; a from-scratch
// build instead re-hashes every entity string and re-merges every row.
//
// csr_concat_blocks assembles a CSR from blocks (rows, ptr, entries): row i is the
// concatenation of its segments in block order. A grown knowledge index stores its graph as
// a full block plus one block per add of the rows that changed and only their new entries
// (the appended neighbours above), so a save writes O(new) graph data; the few rows that lost
// neighbours under the hub guard are stored whole and marked as replacing the earlier ones.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/buffers.h"
#include "common/registry.h"

namespace rasfast {
namespace {

const int64_t* i64_buffer(const py::array& a, const char* name, int64_t len) {
  check_buffer(a, name, 1, 8, {len});
  require(a.dtype().kind() == 'i', std::string(name) + ": expected int64");
  return static_cast<const int64_t*>(a.data());
}

py::array_t<int64_t> vec_to_numpy(const std::vector<int64_t>& v) {
  py::array_t<int64_t> a(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(int64_t));
  return a;
}

py::dict triple_graph_merge(py::array indptr_a, py::array indices_a, py::array head_a,
                            py::array tail_a, py::array degree_a, py::array new_head_a,
                            py::array new_tail_a, int64_t n_entities, int64_t max_degree,
                            int64_t max_edges) {
  require(max_degree >= -1, "max_degree must be >= 0 (or -1 for no limit)");
  require(max_edges >= 0, "max_edges must be >= 0");
  require(indptr_a.ndim() == 1 && indptr_a.shape(0) >= 1, "indptr: expected a 1-d array of n+1 offsets");
  const int64_t n_old = indptr_a.shape(0) - 1;
  const int64_t* indptr = i64_buffer(indptr_a, "indptr", n_old + 1);
  const int64_t nnz_old = indices_a.ndim() == 1 ? indices_a.shape(0) : -1;
  const int64_t* indices = i64_buffer(indices_a, "indices", nnz_old);
  const int64_t* head = i64_buffer(head_a, "head", n_old);
  const int64_t* tail = i64_buffer(tail_a, "tail", n_old);
  require(degree_a.ndim() == 1, "entity_degree: expected a 1-d array");
  const int64_t e_old = degree_a.shape(0);
  const int64_t* old_deg = i64_buffer(degree_a, "entity_degree", e_old);
  require(new_head_a.ndim() == 1, "new_head: expected a 1-d array");
  const int64_t m = new_head_a.shape(0);
  const int64_t* nh = i64_buffer(new_head_a, "new_head", m);
  const int64_t* nt = i64_buffer(new_tail_a, "new_tail", m);
  require(n_entities >= e_old, "n_entities: must be >= the old graph's entity count");

  std::vector<int64_t> deg, out_ptr(n_old + m + 1, 0);
  std::vector<int64_t> changed, replaced;
  py::array_t<int64_t> out_idx;
  int64_t n_hubs = 0;
  bool removed = false;
  {
    py::gil_scoped_release nogil;
    // ---- validation (linear; nothing below may index out of bounds) ----
    require(indptr[0] == 0 && indptr[n_old] == nnz_old, "indptr: must start at 0 and end at len(indices)");
    for (int64_t i = 0; i < n_old; ++i) {
      require(indptr[i + 1] >= indptr[i], "indptr: must be non-decreasing");
      require(head[i] >= 0 && head[i] < e_old && tail[i] >= 0 && tail[i] < e_old,
              "head/tail: entity id out of range [0, len(entity_degree))");
    }
    for (int64_t j = 0; j < m; ++j)
      require(nh[j] >= 0 && nh[j] < n_entities && nt[j] >= 0 && nt[j] < n_entities,
              "new_head/new_tail: entity id out of range [0, n_entities)");

    // ---- degrees after the merge; which entities link before and after ----
    deg.assign(static_cast<size_t>(n_entities), 0);
    std::copy(old_deg, old_deg + e_old, deg.begin());
    std::vector<int64_t> n_new_mem(static_cast<size_t>(n_entities), 0);
    for (int64_t j = 0; j < m; ++j) {
      ++n_new_mem[nh[j]];
      if (nt[j] != nh[j]) ++n_new_mem[nt[j]];
    }
    for (int64_t e = 0; e < n_entities; ++e) deg[e] += n_new_mem[e];
    auto link_new = [&](int64_t e) { return max_degree < 0 || deg[e] <= max_degree; };
    auto became_hub = [&](int64_t e) {
      return e < e_old && n_new_mem[e] > 0 && max_degree >= 0 && old_deg[e] <= max_degree &&
             deg[e] > max_degree;
    };
    int64_t bound = 0, worst = -1;
    for (int64_t e = 0; e < n_entities; ++e) {   // the builder's check, on the merged degrees
      if (!link_new(e)) { ++n_hubs; continue; }
      const int64_t d = deg[e];
      bound += d * (d - 1);
      if (worst < 0 || d > deg[worst]) worst = e;
      if (bound > max_edges) {
        throw py::value_error(
            "max_degree: the triple adjacency would exceed max_edges (" + std::to_string(max_edges) +
            " entries); the most linked entity has degree " + std::to_string(deg[worst]) +
            ": pass max_degree to stop hub entities from linking");
      }
    }

    // ---- member lists (ascending) of the linking entities the new triples mention ----
    std::vector<int64_t> tslot(static_cast<size_t>(n_entities), -1);
    int64_t n_t = 0;
    for (int64_t e = 0; e < n_entities; ++e)
      if (n_new_mem[e] > 0 && link_new(e)) tslot[e] = n_t++;
    std::vector<int64_t> tptr(n_t + 1, 0), tsplit(n_t);
    for (int64_t i = 0; i < n_old; ++i) {
      if (tslot[head[i]] >= 0) ++tptr[tslot[head[i]] + 1];
      if (tail[i] != head[i] && tslot[tail[i]] >= 0) ++tptr[tslot[tail[i]] + 1];
    }
    for (int64_t e = 0; e < n_entities; ++e)
      if (tslot[e] >= 0) tptr[tslot[e] + 1] += n_new_mem[e];
    for (int64_t k = 0; k < n_t; ++k) tptr[k + 1] += tptr[k];
    std::vector<int64_t> tmem(tptr[n_t]);
    {
      std::vector<int64_t> fill(tptr.begin(), tptr.end() - 1);
      for (int64_t i = 0; i < n_old; ++i) {
        if (tslot[head[i]] >= 0) tmem[fill[tslot[head[i]]]++] = i;
        if (tail[i] != head[i] && tslot[tail[i]] >= 0) tmem[fill[tslot[tail[i]]]++] = i;
      }
      for (int64_t k = 0; k < n_t; ++k) tsplit[k] = fill[k];   // first new member
      for (int64_t j = 0; j < m; ++j) {
        const int64_t r = n_old + j;
        if (tslot[nh[j]] >= 0) tmem[fill[tslot[nh[j]]]++] = r;
        if (nt[j] != nh[j] && tslot[nt[j]] >= 0) tmem[fill[tslot[nt[j]]]++] = r;
      }
    }

    // union of two sorted lists minus `self`, written to out (or only counted when null)
    auto unite = [](const int64_t* a, const int64_t* ae, const int64_t* b, const int64_t* be,
                    int64_t self, int64_t* out) -> int64_t {
      int64_t c = 0;
      auto put = [&](int64_t v) {
        if (v == self) return;
        if (out) out[c] = v;
        ++c;
      };
      while (a != ae && b != be) {
        if (*a < *b) put(*a++);
        else if (*b < *a) put(*b++);
        else put(*a++), ++b;
      }
      while (a != ae) put(*a++);
      while (b != be) put(*b++);
      return c;
    };
    // the (new-member part of the) lists of a row's entities h, t; `from_split`: new part only
    auto lists = [&](int64_t h, int64_t t, bool from_split, const int64_t*& a, const int64_t*& ae,
                     const int64_t*& b, const int64_t*& be) {
      a = ae = b = be = nullptr;
      const int64_t sh = tslot[h];
      if (sh >= 0) a = tmem.data() + (from_split ? tsplit[sh] : tptr[sh]), ae = tmem.data() + tptr[sh + 1];
      const int64_t st = t != h ? tslot[t] : -1;
      if (st >= 0) b = tmem.data() + (from_split ? tsplit[st] : tptr[st]), be = tmem.data() + tptr[st + 1];
    };
    // an old row whose entity stopped linking keeps the neighbours sharing a linking entity
    auto keeps = [&](int64_t h, int64_t t, int64_t j) {
      const int64_t hj = j < n_old ? head[j] : nh[j - n_old], tj = j < n_old ? tail[j] : nt[j - n_old];
      return (link_new(h) && (hj == h || tj == h)) || (link_new(t) && (hj == t || tj == t));
    };
    // per-entity flags (1 byte each, cache friendly): 1 = gains linking new members,
    // 2 = stopped linking; a row whose entities have neither is copied unchanged
    std::vector<uint8_t> eflag(static_cast<size_t>(n_entities), 0);
    for (int64_t e = 0; e < n_entities; ++e)
      eflag[e] = static_cast<uint8_t>((tslot[e] >= 0 ? 1 : 0) | (became_hub(e) ? 2 : 0));
    // emit(r, kind, out): row r of the merged graph (counted only when out is null)
    auto emit = [&](int64_t r, uint8_t kind, int64_t* out) -> int64_t {
      const int64_t *a, *ae, *b, *be;
      if (r >= n_old) {
        const int64_t j = r - n_old;
        lists(nh[j], nt[j], false, a, ae, b, be);
        return unite(a, ae, b, be, r, out);
      }
      const int64_t h = head[r], t = tail[r];
      int64_t c = 0;
      const int64_t s = indptr[r], e = indptr[r + 1];
      if (!(kind & 2)) {
        c = e - s;
        if (out && c) std::memcpy(out, indices + s, static_cast<size_t>(c) * sizeof(int64_t));
      } else {
        for (int64_t p = s; p < e; ++p) {
          const int64_t j = indices[p];
          if (j < 0 || j >= n_old) continue;   // never in a valid graph; keeps lookups in range
          if (keeps(h, t, j)) {
            if (out) out[c] = j;
            ++c;
          }
        }
      }
      lists(h, t, true, a, ae, b, be);
      return c + unite(a, ae, b, be, -1, out ? out + c : nullptr);
    };

    const int64_t n = n_old + m;
    std::vector<uint8_t> rkind(n_old, 0);
    int flag_removed = 0;
#pragma omp parallel for schedule(dynamic, 4096) reduction(| : flag_removed)
    for (int64_t r = 0; r < n; ++r) {
      if (r >= n_old) {
        out_ptr[r + 1] = emit(r, 0, nullptr);
        continue;
      }
      const uint8_t kind = static_cast<uint8_t>(eflag[head[r]] | eflag[tail[r]]);
      rkind[r] = kind;
      const int64_t was = indptr[r + 1] - indptr[r];
      out_ptr[r + 1] = kind ? emit(r, kind, nullptr) : was;
      if (kind & 2) {   // a row may lose entries and gain others: removed if any old one went
        int64_t kept = 0;
        for (int64_t p = indptr[r]; p < indptr[r + 1]; ++p) {
          const int64_t j = indices[p];
          if (j >= 0 && j < n_old && keeps(head[r], tail[r], j)) ++kept;
        }
        if (kept < was) flag_removed = 1;
      }
    }
    removed = flag_removed != 0;
    for (int64_t r = 0; r < n; ++r) out_ptr[r + 1] += out_ptr[r];
    for (int64_t r = 0; r < n_old; ++r) {
      if (rkind[r]) changed.push_back(r);
      if (rkind[r] & 2) replaced.push_back(r);   // may have lost entries: not an append
    }
    int64_t* ind = nullptr;
    {
      py::gil_scoped_acquire gil;
      out_idx = py::array_t<int64_t>(static_cast<py::ssize_t>(out_ptr[n]));
      ind = out_idx.mutable_data();
    }
    // fill: a run of unchanged old rows is one memcpy (their entries are contiguous in both)
    const int64_t chunk = 4096, n_chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; ++c) {
      const int64_t lo = c * chunk, hi = std::min(n, lo + chunk);
      int64_t run = -1;   // first row of the current run of unchanged old rows
      for (int64_t r = lo; r <= hi; ++r) {
        const bool plain = r < hi && r < n_old && rkind[r] == 0;
        if (plain) {
          if (run < 0) run = r;
          continue;
        }
        if (run >= 0) {
          const int64_t len = indptr[r] - indptr[run];
          if (len) std::memcpy(ind + out_ptr[run], indices + indptr[run], static_cast<size_t>(len) * sizeof(int64_t));
          run = -1;
        }
        if (r < hi) emit(r, r < n_old ? rkind[r] : 0, ind + out_ptr[r]);
      }
    }
  }
  py::dict out;
  out["indptr"] = vec_to_numpy(out_ptr);
  out["indices"] = out_idx;
  out["entity_degree"] = vec_to_numpy(deg);
  out["n_hubs"] = n_hubs;
  out["changed"] = vec_to_numpy(changed);
  out["replaced"] = vec_to_numpy(replaced);
  out["removed"] = removed;
  return out;
}

// blocks: a list of (rows, ptr, entries[, replace]); rows None = rows 0..len(ptr)-2. Row i of
// the result is the concatenation of row i's segments over the blocks, in order, starting at
// the last block that lists i in its (ascending) `replace` rows: that segment is the whole row
// (a row that lost neighbours when an entity stopped linking).
py::tuple csr_concat_blocks(int64_t n_rows, py::list blocks) {
  require(n_rows >= 0, "n_rows: must be >= 0");
  struct Block { const int64_t* rows; int64_t nr; const int64_t* ptr; const int64_t* ent; };
  std::vector<int32_t> start(static_cast<size_t>(n_rows), 0);   // first block that counts per row
  std::vector<Block> bs;
  std::vector<py::array> keep;   // holds the buffers alive
  for (py::handle h : blocks) {
    py::tuple t = py::reinterpret_borrow<py::tuple>(h);
    require(t.size() == 3 || t.size() == 4, "blocks: expected (rows, ptr, entries[, replace]) tuples");
    py::array ptr = py::array::ensure(t[1]);
    require(ptr && ptr.ndim() == 1 && ptr.shape(0) >= 1, "blocks: ptr must be a 1-d array of offsets");
    const int64_t nr = ptr.shape(0) - 1;
    const int64_t* p = i64_buffer(ptr, "blocks ptr", nr + 1);
    py::array ent = py::array::ensure(t[2]);
    require(ent && ent.ndim() == 1, "blocks: entries must be a 1-d array");
    const int64_t* e = i64_buffer(ent, "blocks entries", ent.shape(0));
    require(p[0] == 0 && p[nr] == ent.shape(0), "blocks: ptr must start at 0 and end at len(entries)");
    for (int64_t k = 0; k < nr; ++k) require(p[k + 1] >= p[k], "blocks: ptr must be non-decreasing");
    const int64_t* rows = nullptr;
    if (!t[0].is_none()) {
      py::array ra = py::array::ensure(t[0]);
      require(ra && ra.ndim() == 1, "blocks: rows must be a 1-d array");
      rows = i64_buffer(ra, "blocks rows", nr);
      for (int64_t k = 0; k < nr; ++k)
        require(rows[k] >= 0 && rows[k] < n_rows && (k == 0 || rows[k] > rows[k - 1]),
                "blocks: rows must be ascending ids in [0, n_rows)");
      keep.push_back(ra);
    } else {
      require(nr <= n_rows, "blocks: a full block has more rows than n_rows");
    }
    if (t.size() == 4 && !t[3].is_none()) {
      py::array rep = py::array::ensure(t[3]);
      require(rep && rep.ndim() == 1, "blocks: replace must be a 1-d array");
      const int64_t* rp = i64_buffer(rep, "blocks replace", rep.shape(0));
      for (int64_t k = 0; k < rep.shape(0); ++k) {
        const int64_t r = rp[k];
        const bool in_block = rows ? std::binary_search(rows, rows + nr, r) : (r >= 0 && r < nr);
        require(in_block && (k == 0 || r > rp[k - 1]),
                "blocks: replace must be ascending rows of its block");
        start[r] = static_cast<int32_t>(bs.size());
      }
      keep.push_back(rep);
    }
    keep.push_back(ptr);
    keep.push_back(ent);
    bs.push_back({rows, nr, p, e});
  }
  std::vector<int64_t> indptr(n_rows + 1, 0);
  for (size_t bi = 0; bi < bs.size(); ++bi) {
    const Block& b = bs[bi];
    for (int64_t k = 0; k < b.nr; ++k) {
      const int64_t r = b.rows ? b.rows[k] : k;
      if (static_cast<int32_t>(bi) >= start[r]) indptr[r + 1] += b.ptr[k + 1] - b.ptr[k];
    }
  }
  for (int64_t i = 0; i < n_rows; ++i) indptr[i + 1] += indptr[i];
  py::array_t<int64_t> out(static_cast<py::ssize_t>(indptr[n_rows]));
  int64_t* o = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    std::vector<int64_t> cur(indptr.begin(), indptr.end() - 1);
    for (size_t bi = 0; bi < bs.size(); ++bi) {
      const Block& b = bs[bi];
      const int32_t me = static_cast<int32_t>(bi);
#pragma omp parallel for schedule(dynamic, 4096)
      for (int64_t k = 0; k < b.nr; ++k) {
        const int64_t r = b.rows ? b.rows[k] : k, len = b.ptr[k + 1] - b.ptr[k];
        if (me < start[r]) continue;
        if (len) std::memcpy(o + cur[r], b.ent + b.ptr[k], static_cast<size_t>(len) * sizeof(int64_t));
        cur[r] += len;
      }
    }
  }
  return py::make_tuple(vec_to_numpy(indptr), out);
}

void bind(py::module_& m) {
  m.def("triple_graph_merge", &triple_graph_merge, py::arg("indptr"), py::arg("indices"),
        py::arg("head"), py::arg("tail"), py::arg("entity_degree"), py::arg("new_head"),
        py::arg("new_tail"), py::arg("n_entities"), py::arg("max_degree"), py::arg("max_edges"),
        "Merges new triples (entity ids new_head/new_tail) into a triple adjacency: indptr, "
        "indices, entity_degree, n_hubs of the merged graph, the old rows that changed, and "
        "whether any old entry was removed (an entity stopped linking) and the old rows of "
        "such entities (replaced: rewritten, not appended to).");
  m.def("csr_concat_blocks", &csr_concat_blocks, py::arg("n_rows"), py::arg("blocks"),
        "(indptr, indices) whose row i concatenates row i's segments of the (rows, ptr, "
        "entries[, replace]) blocks in order, from the last block whose replace lists i.");
}

}  // namespace
RASFAST_REGISTER(graph_merge, bind);
}  // namespace rasfast
