// TripleGraph build: entity normalisation, entity ids, and the triple adjacency as CSR.
//
// Rules (the pure-Python oracle rasfast/reference/triple_graph.py states them; tests compare):
// - well-formed triple: list/tuple of exactly 3 str parts, each with a non-white-space char.
// - entities = subject and object; with `normalize`, ASCII strings are normalised here
//   (lower-case, collapse white space, strip surrounding punctuation = Unicode category P),
//   non-ASCII strings are deduplicated and handed ONCE each to a Python callable
//   (str.casefold needs Unicode tables we do not duplicate in C++).
// - entity ids by first appearance; triples sharing an entity are neighbours unless that
//   entity's degree (triples mentioning it) exceeds max_degree (>= 0; -1 = no guard).
// - max_edges: ValueError (before any large allocation) when sum over linking entities of
//   d*(d-1), an upper bound of nnz, exceeds it -- a hub would otherwise take minutes and GBs.
//
// Phases: (1) with the GIL, validate and copy the entity strings' UTF-8 bytes into an arena
// (so nothing points into Python objects once the GIL is released); (2) without the GIL:
// normalise (OpenMP), hash (OpenMP), assign ids (a concurrent open-addressing table keeps
// each key's first slot; a linear scan numbers them in order), entity -> triples CSR by
// counting sort, triple adjacency by merging the two sorted entity lists of each triple
// (OpenMP, count then fill).
#include <Python.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/buffers.h"
#include "common/registry.h"

namespace rasfast {
namespace {

// ---- ASCII character classes (must equal Python's str.isspace / unicodedata category P*) ----
inline bool ascii_space(unsigned char c) { return (c >= 9 && c <= 13) || (c >= 28 && c <= 32); }
inline bool ascii_punct(unsigned char c) {
  // !"#%&'()*,-./:;?@[\]_{}  ($+<=>^`|~ are symbols (S*), not punctuation)
  switch (c) {
    case '!': case '"': case '#': case '%': case '&': case '\'': case '(': case ')':
    case '*': case ',': case '-': case '.': case '/': case ':': case ';': case '?':
    case '@': case '[': case '\\': case ']': case '_': case '{': case '}':
      return true;
    default:
      return false;
  }
}

// Normalises ASCII src[0..n) into dst (n bytes available); returns the new length.
int64_t normalize_ascii(const char* src, int64_t n, char* dst) {
  // lower-case + collapse white space runs to one space + trim
  int64_t m = 0;
  bool pending_space = false;
  for (int64_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(src[i]);
    if (ascii_space(c)) {
      pending_space = m > 0;
      continue;
    }
    if (pending_space) dst[m++] = ' ';
    pending_space = false;
    dst[m++] = static_cast<char>((c >= 'A' && c <= 'Z') ? c + 32 : c);
  }
  // strip surrounding punctuation (and the spaces it exposes) unless nothing would remain
  int64_t a = 0, b = m;
  auto strip = [&](char c) {
    unsigned char u = static_cast<unsigned char>(c);
    return u == ' ' || ascii_punct(u);
  };
  while (a < b && strip(dst[a])) ++a;
  while (b > a && strip(dst[b - 1])) --b;
  if (a == b) return m;
  if (a > 0) std::memmove(dst, dst + a, static_cast<size_t>(b - a));
  return b - a;
}

inline uint64_t hash_bytes(const char* p, int64_t n) {
  uint64_t h = 1469598103934665603ULL ^ static_cast<uint64_t>(n);  // FNV-1a
  for (int64_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 1099511628211ULL;
  }
  h ^= h >> 29;  // final mix: FNV's low bits are weak for power-of-two tables
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 32;
  return h;
}

// True when the str has a character that is not white space (Py_UNICODE_ISSPACE == isspace).
bool has_content(PyObject* s) {
  const int kind = PyUnicode_KIND(s);
  const void* data = PyUnicode_DATA(s);
  const Py_ssize_t n = PyUnicode_GET_LENGTH(s);
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i))) return true;
  return false;
}

// UTF-8 bytes of a str; lone surrogates pass through ("surrogatepass") instead of failing.
void append_utf8(PyObject* s, std::string& arena) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (p != nullptr) {
    arena.append(p, static_cast<size_t>(n));
    return;
  }
  PyErr_Clear();
  py::bytes b = py::reinterpret_steal<py::bytes>(PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass"));
  if (!b) throw py::error_already_set();
  arena.append(PyBytes_AS_STRING(b.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(b.ptr())));
}

py::array_t<int64_t> to_numpy(const std::vector<int64_t>& v) {
  py::array_t<int64_t> a(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(int64_t));
  return a;
}

// adjacency=false stops after the entity ids (kept, head, tail, entities): the merge
// (triple_graph_merge) parses only the NEW triples this way and maps their entities to ids.
py::dict triple_graph_build_impl(py::list triples, bool normalize, int64_t max_degree,
                                 int64_t max_edges, py::object normalizer, bool adjacency) {
  require(max_degree >= -1, "max_degree must be >= 0 (or -1 for no limit)");
  require(max_edges >= 0, "max_edges must be >= 0");
  const Py_ssize_t n_in = PyList_GET_SIZE(triples.ptr());

  // ---- phase 1 (GIL held): validate, copy entity bytes ----
  std::vector<int64_t> kept;
  kept.reserve(static_cast<size_t>(n_in));
  std::string arena;                    // raw UTF-8 of subjects and objects, back to back
  std::vector<int64_t> slot_off;        // slot 2i = subject of kept triple i, 2i+1 = object
  std::vector<int32_t> slot_nonascii;   // index into the unique non-ASCII strings, or -1
  slot_off.reserve(2 * static_cast<size_t>(n_in) + 1);
  slot_nonascii.reserve(2 * static_cast<size_t>(n_in));
  std::unordered_map<std::string, int32_t> nonascii_ids;
  py::list nonascii_strs;
  for (Py_ssize_t i = 0; i < n_in; ++i) {
    PyObject* t = PyList_GET_ITEM(triples.ptr(), i);
    if (!PyList_Check(t) && !PyTuple_Check(t)) continue;
    if (PySequence_Fast_GET_SIZE(t) != 3) continue;
    PyObject** parts = PySequence_Fast_ITEMS(t);
    bool ok = true;
    for (int j = 0; j < 3 && ok; ++j) ok = PyUnicode_Check(parts[j]) && has_content(parts[j]);
    if (!ok) continue;
    kept.push_back(i);
    for (int j : {0, 2}) {
      PyObject* s = parts[j];
      const size_t start = arena.size();
      slot_off.push_back(static_cast<int64_t>(start));
      append_utf8(s, arena);
      int32_t na = -1;
      if (normalize && !PyUnicode_IS_ASCII(s)) {
        std::string key(arena.data() + start, arena.size() - start);
        auto it = nonascii_ids.find(key);
        if (it == nonascii_ids.end()) {
          na = static_cast<int32_t>(nonascii_ids.size());
          nonascii_ids.emplace(std::move(key), na);
          nonascii_strs.append(py::reinterpret_borrow<py::object>(s));
        } else {
          na = it->second;
        }
      }
      slot_nonascii.push_back(na);
    }
  }
  slot_off.push_back(static_cast<int64_t>(arena.size()));
  const int64_t n = static_cast<int64_t>(kept.size());
  const int64_t n_slots = 2 * n;

  // the normaliser sees each distinct non-ASCII string once
  std::string na_arena;
  std::vector<int64_t> na_off{0};
  if (py::len(nonascii_strs) > 0) {
    py::object res = normalizer(nonascii_strs);
    require(py::isinstance<py::list>(res) && py::len(res) == py::len(nonascii_strs),
            "normalizer must return a list of str, one per input string");
    for (py::handle h : res) {
      require(PyUnicode_Check(h.ptr()), "normalizer must return str values");
      append_utf8(h.ptr(), na_arena);
      na_off.push_back(static_cast<int64_t>(na_arena.size()));
    }
  }

  std::vector<int64_t> head(n), tail(n), entity_degree, indptr(n + 1, 0);
  py::array_t<int64_t> indices;  // allocated once its size is known (nnz can be large)
  std::vector<int64_t> ent_rep;  // slot of each entity's first appearance
  std::vector<int64_t> key_off(n_slots), key_len(n_slots);
  std::string norm;  // normalised ASCII keys, at the same offsets as the arena
  int64_t n_hubs = 0;
  {
    py::gil_scoped_release nogil;
    const char* raw = arena.data();
    if (normalize) norm.resize(arena.size());
    char* nrm = normalize ? &norm[0] : nullptr;
    // ---- keys: pointer/length of each slot's (normalised) string ----
    // key_off >= 0: offset in norm/arena; key_off < 0: -(1 + index) into the non-ASCII arena
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < n_slots; ++s) {
      const int64_t off = slot_off[s], len = slot_off[s + 1] - off;
      if (!normalize) {
        key_off[s] = off, key_len[s] = len;
      } else if (slot_nonascii[s] >= 0) {
        const int32_t u = slot_nonascii[s];
        key_off[s] = -1 - u, key_len[s] = na_off[u + 1] - na_off[u];
      } else {
        key_off[s] = off, key_len[s] = normalize_ascii(raw + off, len, nrm + off);
      }
    }
    const char* base = normalize ? nrm : raw;
    auto key_ptr = [&](int64_t s) -> const char* {
      return key_off[s] >= 0 ? base + key_off[s] : na_arena.data() + na_off[-1 - key_off[s]];
    };
    std::vector<uint64_t> hashes(n_slots);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < n_slots; ++s) hashes[s] = hash_bytes(key_ptr(s), key_len[s]);

    // ---- entity ids in first-appearance order ----
    // (a) concurrent open addressing (linear probing, CAS): each cell ends holding the
    //     SMALLEST slot of its key (an atomic min), i.e. the key's first appearance;
    // (b) first appearances, scanned in slot order, get consecutive ids.
    // Relaxed atomics suffice: keys and hashes were written before this parallel region.
    uint64_t cap = 16;
    while (cap < static_cast<uint64_t>(2 * n_slots)) cap <<= 1;
    const uint64_t mask = cap - 1;
    std::unique_ptr<std::atomic<int64_t>[]> table(new std::atomic<int64_t>[cap]);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < static_cast<int64_t>(cap); ++c) table[c].store(-1, std::memory_order_relaxed);
    auto same_key = [&](int64_t a, int64_t b) {
      return hashes[a] == hashes[b] && key_len[a] == key_len[b] &&
             std::memcmp(key_ptr(a), key_ptr(b), static_cast<size_t>(key_len[a])) == 0;
    };
    std::vector<int64_t> cell_of(n_slots);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < n_slots; ++s) {
      uint64_t p = hashes[s] & mask;
      while (true) {
        int64_t cur = table[p].load(std::memory_order_relaxed);
        if (cur < 0 && table[p].compare_exchange_strong(cur, s, std::memory_order_relaxed)) break;
        // cur is a slot (cells never return to -1); any slot of a key compares the same
        if (same_key(cur, s)) {
          while (s < cur && !table[p].compare_exchange_weak(cur, s, std::memory_order_relaxed)) {
          }
          break;
        }
        p = (p + 1) & mask;
      }
      cell_of[s] = static_cast<int64_t>(p);
    }
    std::vector<int64_t> rep(n_slots), slot_entity(n_slots);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < n_slots; ++s) rep[s] = table[cell_of[s]].load(std::memory_order_relaxed);
    for (int64_t s = 0; s < n_slots; ++s) {
      if (rep[s] == s) {
        slot_entity[s] = static_cast<int64_t>(ent_rep.size());
        ent_rep.push_back(s);
      }
    }
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < n_slots; ++s) slot_entity[s] = slot_entity[rep[s]];
    const int64_t n_ent = static_cast<int64_t>(ent_rep.size());
    for (int64_t i = 0; i < n; ++i) head[i] = slot_entity[2 * i], tail[i] = slot_entity[2 * i + 1];
    if (adjacency) {

    // ---- entity -> triples (counting sort; each list ascending, a triple once per entity) ----
    std::vector<int64_t> ent_ptr(n_ent + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
      ++ent_ptr[head[i] + 1];
      if (tail[i] != head[i]) ++ent_ptr[tail[i] + 1];
    }
    for (int64_t e = 0; e < n_ent; ++e) ent_ptr[e + 1] += ent_ptr[e];
    std::vector<int64_t> ent_trip(ent_ptr[n_ent]);
    {
      std::vector<int64_t> fill(ent_ptr.begin(), ent_ptr.end() - 1);
      for (int64_t i = 0; i < n; ++i) {
        ent_trip[fill[head[i]]++] = i;
        if (tail[i] != head[i]) ent_trip[fill[tail[i]]++] = i;
      }
    }
    entity_degree.resize(n_ent);
    for (int64_t e = 0; e < n_ent; ++e) {
      entity_degree[e] = ent_ptr[e + 1] - ent_ptr[e];
      if (max_degree >= 0 && entity_degree[e] > max_degree) ++n_hubs;
    }
    auto linking = [&](int64_t e) { return max_degree < 0 || entity_degree[e] <= max_degree; };
    // refuse (before allocating) an adjacency larger than max_edges: a bound is sum d*(d-1)
    int64_t bound = 0, worst = -1;
    for (int64_t e = 0; e < n_ent; ++e) {
      if (!linking(e)) continue;
      const int64_t d = entity_degree[e];
      bound += d * (d - 1);
      if (worst < 0 || d > entity_degree[worst]) worst = e;
      if (bound > max_edges) {
        throw py::value_error(
            "max_degree: the triple adjacency would exceed max_edges (" + std::to_string(max_edges) +
            " entries); the most linked entity has degree " + std::to_string(entity_degree[worst]) +
            ": pass max_degree to stop hub entities from linking");
      }
    }

    // ---- triple adjacency: union of the two sorted entity lists, minus the triple itself ----
    // emit(i, out): writes the neighbours of i to out (or only counts them when out is null)
    auto emit = [&](int64_t i, int64_t* out) -> int64_t {
      const int64_t* a = nullptr; const int64_t* ae = nullptr;
      const int64_t* b = nullptr; const int64_t* be = nullptr;
      if (linking(head[i])) a = ent_trip.data() + ent_ptr[head[i]], ae = ent_trip.data() + ent_ptr[head[i] + 1];
      if (tail[i] != head[i] && linking(tail[i]))
        b = ent_trip.data() + ent_ptr[tail[i]], be = ent_trip.data() + ent_ptr[tail[i] + 1];
      int64_t m = 0;
      auto put = [&](int64_t v) {
        if (v == i) return;
        if (out) out[m] = v;
        ++m;
      };
      while (a != ae && b != be) {
        if (*a < *b) put(*a++);
        else if (*b < *a) put(*b++);
        else put(*a++), ++b;
      }
      while (a != ae) put(*a++);
      while (b != be) put(*b++);
      return m;
    };
#pragma omp parallel for schedule(dynamic, 1024)
    for (int64_t i = 0; i < n; ++i) indptr[i + 1] = emit(i, nullptr);
    for (int64_t i = 0; i < n; ++i) indptr[i + 1] += indptr[i];
    int64_t* ind = nullptr;
    {
      py::gil_scoped_acquire gil;
      indices = py::array_t<int64_t>(static_cast<py::ssize_t>(indptr[n]));
      ind = indices.mutable_data();
    }
#pragma omp parallel for schedule(dynamic, 1024)
    for (int64_t i = 0; i < n; ++i) emit(i, ind + indptr[i]);
    }  // adjacency
  }

  // ---- back to Python: entity strings from their first appearance ----
  py::list entities(ent_rep.size());
  const char* base = normalize ? norm.data() : arena.data();
  for (size_t e = 0; e < ent_rep.size(); ++e) {
    const int64_t s = ent_rep[e];
    const char* p = key_off[s] >= 0 ? base + key_off[s] : na_arena.data() + na_off[-1 - key_off[s]];
    PyObject* str = PyUnicode_DecodeUTF8(p, key_len[s], "surrogatepass");
    if (!str) throw py::error_already_set();
    PyList_SET_ITEM(entities.ptr(), static_cast<Py_ssize_t>(e), str);
  }
  py::dict out;
  out["kept"] = to_numpy(kept);
  out["head"] = to_numpy(head);
  out["tail"] = to_numpy(tail);
  out["entities"] = entities;
  out["n_skipped"] = static_cast<int64_t>(n_in) - n;
  if (!adjacency) return out;
  out["entity_degree"] = to_numpy(entity_degree);
  out["indptr"] = to_numpy(indptr);
  out["indices"] = indices;
  out["n_hubs"] = n_hubs;
  return out;
}

py::dict triple_graph_build(py::list triples, bool normalize, int64_t max_degree,
                            int64_t max_edges, py::object normalizer) {
  return triple_graph_build_impl(triples, normalize, max_degree, max_edges, normalizer, true);
}

py::dict triple_graph_entities(py::list triples, bool normalize, py::object normalizer) {
  return triple_graph_build_impl(triples, normalize, -1, 0, normalizer, false);
}

void bind(py::module_& m) {
  m.def("triple_graph_build", &triple_graph_build, py::arg("triples"), py::arg("normalize"),
        py::arg("max_degree"), py::arg("max_edges"), py::arg("normalizer"),
        "Builds a triple graph from a list of triples: kept input positions, head/tail entity "
        "ids, entity strings and degrees, and the triple adjacency as CSR (indptr, indices).");
  m.def("triple_graph_entities", &triple_graph_entities, py::arg("triples"), py::arg("normalize"),
        py::arg("normalizer"),
        "The first half of triple_graph_build: kept input positions, head/tail entity ids local "
        "to these triples (first appearance) and the entity strings; no adjacency.");
}

}  // namespace
RASFAST_REGISTER(graph, bind);
}  // namespace rasfast
