// The fsdp-model/1 reader (tools/README.md "Model files"): one file over 600 lines because the
// format's validation (every field, its type and range, each with its own message) is one concept.
#include "tools/plan/model_file.h"

#include <fmt/format.h>
#include <simdjson.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "core/env.h"
#include "core/error.h"
#include "tools/plan/known_classes.h"

namespace fsdp::plan {

std::pair<std::size_t, std::size_t> line_and_column(const std::string& text, std::size_t offset) {
  offset = std::min(offset, text.size());
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

namespace {

// The document is read with simdjson (a 100 MB model file parses in well under a second, ten
// times faster than a DOM of nlohmann::json); nlohmann's parser only explains a document that
// simdjson rejects, with the line and column of the fault.
using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// A scalar as JSON text, spelled as nlohmann::json writes it (messages keep their wording).
std::string scalar_text(element v) {
  switch (v.type()) {
    case element_type::INT64:
      return std::to_string(int64_t(v));
    case element_type::UINT64:
      return std::to_string(uint64_t(v));
    case element_type::DOUBLE:
      return nlohmann::json(double(v)).dump();
    case element_type::STRING:
      return nlohmann::json(std::string(std::string_view(v))).dump();
    case element_type::BOOL:
      return bool(v) ? "true" : "false";
    default:
      return "null";
  }
}

// A JSON value for a message: at most a few levels and about 60 characters, whatever the value
// (a value nested 100 000 deep or a megabyte long is shown by its start, never serialised whole).
void brief_into(element v, int depth, std::string& out) {
  constexpr std::size_t kMax = 60;
  const bool is_array = v.type() == element_type::ARRAY;
  if (!is_array && v.type() != element_type::OBJECT) {
    out += scalar_text(v);
    return;
  }
  if (depth >= 3) {
    out += is_array ? "[...]" : "{...}";
    return;
  }
  out += is_array ? '[' : '{';
  bool first = true;
  auto item = [&](element e, const std::string_view* key) {
    if (!first) {
      if (out.size() > kMax) return false;
      out += ',';
    }
    first = false;
    if (key) out += nlohmann::json(std::string(*key)).dump() + ':';
    brief_into(e, depth + 1, out);
    return true;
  };
  bool whole = true;
  if (is_array) {
    for (element e : array(v))
      if (!(whole = item(e, nullptr))) break;
  } else {
    for (auto kv : object(v))
      if (!(whole = item(kv.value, &kv.key))) break;
  }
  if (!whole) out += ",...";
  out += is_array ? ']' : '}';
}

std::string brief(element v) {
  std::string out;
  brief_into(v, 0, out);
  if (out.size() > 80) out = out.substr(0, 60) + "...";  // a long string or number
  return out;
}

// Where a value sits in the document ("module.children[2].module.params[0]"), kept as a chain
// of parent links so that the 1M-module case builds no strings unless there is an error.
struct Where {
  const Where* parent;
  const char* key;  // object key, or nullptr for an array index
  std::size_t index;
  std::string str() const {
    std::vector<const Where*> chain;
    for (const Where* w = this; w; w = w->parent) chain.push_back(w);
    std::string s;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if ((*it)->key) {
        if (!s.empty()) s += '.';
        s += (*it)->key;
      } else {
        s += '[';  // piecewise: "[" + to_string(...) trips a GCC 12 -Wrestrict false positive
        s += std::to_string((*it)->index);
        s += ']';
      }
    }
    return s;
  }
};

// The members of a module, parameter or buffer object, found in one pass over its keys (a
// repeated key: the last one counts, as nlohmann::json reads it).
struct Fields {
  std::optional<element> type, bases, id, ref, params, buffers, children, attributes;  // a module
  std::optional<element> module;                                         // a child slot
  std::optional<element> name, shape, dtype, requires_grad, persistent;  // a tensor

  explicit Fields(object obj) {
    static constexpr std::pair<std::string_view, std::optional<element> Fields::*> kKeys[] = {
        {"type", &Fields::type},
        {"bases", &Fields::bases},
        {"id", &Fields::id},
        {"ref", &Fields::ref},
        {"params", &Fields::params},
        {"buffers", &Fields::buffers},
        {"children", &Fields::children},
        {"attributes", &Fields::attributes},
        {"module", &Fields::module},
        {"name", &Fields::name},
        {"shape", &Fields::shape},
        {"dtype", &Fields::dtype},
        {"requires_grad", &Fields::requires_grad},
        {"persistent", &Fields::persistent}};
    for (auto kv : obj)
      for (const auto& [key, field] : kKeys)
        if (kv.key == key) {
          this->*field = kv.value;
          break;
        }
  }
};

bool is_null(element e) {
  return e.type() == element_type::NULL_VALUE;
}

class Builder {
 public:
  Builder(std::string source, element doc) : source_(std::move(source)), doc_(doc) {}

  [[noreturn]] void fail(const Where& at, const std::string& msg) const {
    throw InputError(fmt::format("{}: at {}: {}", source_, at.str(), msg));
  }

  std::string_view string_member(const std::optional<element>& v, const char* key,
                                 const Where& at) const {
    if (!v) fail(at, fmt::format("missing \"{}\"", key));
    if (v->type() != element_type::STRING)
      fail(Where{&at, key, 0}, fmt::format("expected a string, got {}", brief(*v)));
    return std::string_view(*v);
  }

  std::optional<array> optional_array(const std::optional<element>& v, const char* key,
                                      const Where& at) const {
    if (!v || is_null(*v)) return std::nullopt;
    if (v->type() != element_type::ARRAY) fail(Where{&at, key, 0}, "expected a list");
    return array(*v);
  }

  Shape shape(const Fields& f, const Where& at) const {
    Where w{&at, "shape", 0};
    if (!f.shape) fail(at, "missing \"shape\"");
    if (f.shape->type() != element_type::ARRAY)
      fail(w, fmt::format("shape must be a list of integers, got {}", brief(*f.shape)));
    Shape out;
    std::int64_t numel = 1;
    for (element d : array(*f.shape)) {
      // Integers that fit in int64 are INT64 (UINT64 holds only larger ones).
      if (d.type() != element_type::INT64 || int64_t(d) < 0)
        fail(w,
             fmt::format("shape must be a list of non-negative integers, got {}", brief(*f.shape)));
      const std::int64_t v = int64_t(d);
      if (__builtin_mul_overflow(numel, v, &numel))
        fail(w, fmt::format("shape {} has more than 2^63 elements", brief(*f.shape)));
      out.push_back(v);
    }
    return out;
  }

  DType dtype(const Fields& f, const Where& at) const {
    if (!f.dtype || is_null(*f.dtype)) return DType::Float32;
    if (f.dtype->type() != element_type::STRING) fail(Where{&at, "dtype", 0}, "expected a string");
    const std::string_view name(*f.dtype);
    // The common spellings without building a string.
    if (name == "float32") return DType::Float32;
    try {
      return dtype_from_name(std::string(name));
    } catch (const ValueError& e) {
      fail(Where{&at, "dtype", 0}, e.what());
    }
  }

  // Whether `id` is defined anywhere in the document: a ref to a later definition gets a
  // clearer message than "undefined". Only an error pays for this walk.
  bool defined_anywhere(std::string_view id) const {
    std::vector<element> stack{doc_};
    while (!stack.empty()) {
      element j = stack.back();
      stack.pop_back();
      if (j.type() == element_type::OBJECT) {
        for (auto kv : object(j)) {
          if (kv.key == "id" && kv.value.type() == element_type::STRING &&
              std::string_view(kv.value) == id)
            return true;
          if (kv.value.is_array() || kv.value.is_object()) stack.push_back(kv.value);
        }
      } else if (j.type() == element_type::ARRAY) {
        for (element e : array(j))
          if (e.is_array() || e.is_object()) stack.push_back(e);
      }
    }
    return false;
  }

  [[noreturn]] void undefined(const Where& at, const std::string& kind, std::string_view id) {
    if (defined_anywhere(id))
      fail(at, fmt::format("ref \"{}\" is used before the {} with id \"{}\" is defined (define "
                           "it first, then refer to it)",
                           id, kind, id));
    fail(at, fmt::format("ref \"{}\" names no {} (no {} in the file has \"id\": \"{}\")", id, kind,
                         kind, id));
  }

  std::optional<std::string_view> optional_id(const std::optional<element>& v,
                                              const Where& at) const {
    if (!v || is_null(*v)) return std::nullopt;
    if (v->type() != element_type::STRING) fail(Where{&at, "id", 0}, "expected a string");
    return std::string_view(*v);
  }

  void define_id(std::string_view id, const Where& at) {
    if (params_.count(id) || modules_.count(id))
      fail(Where{&at, "id", 0}, fmt::format("id \"{}\" is defined twice", id));
  }

  void add_params(nn::Module& m, const Fields& mf, const Where& at) {
    auto params = optional_array(mf.params, "params", at);
    if (!params) return;
    Where pw{&at, "params", 0};
    std::size_t i = 0;
    for (element p : *params) {
      Where w{&pw, nullptr, i++};
      if (p.type() != element_type::OBJECT) fail(w, "expected an object");
      const Fields f{object(p)};
      name_.assign(string_member(f.name, "name", w));
      Tensor t;
      bool requires_grad = true;
      if (f.ref) {
        if (f.ref->type() != element_type::STRING) fail(Where{&w, "ref", 0}, "expected a string");
        auto it = params_.find(std::string_view(*f.ref));
        if (it == params_.end())
          undefined(Where{&w, "ref", 0}, "parameter", std::string_view(*f.ref));
        t = it->second;
        requires_grad = t.requires_grad() || !t.is_floating_point();
      } else {
        DType dt = dtype(f, w);
        t = empty(shape(f, w), TensorOptions(dt, kMeta));
        if (f.requires_grad && !is_null(*f.requires_grad)) {
          if (f.requires_grad->type() != element_type::BOOL)
            fail(Where{&w, "requires_grad", 0}, "expected true or false");
          requires_grad = bool(*f.requires_grad);
        }
        if (auto id = optional_id(f.id, w)) {
          define_id(*id, w);
          params_.emplace(*id, t);
        }
      }
      try {
        m.register_parameter(name_, t, requires_grad);
      } catch (const InputError&) {
        throw;  // already names the place
      } catch (const fsdp::Error& e) {
        fail(w, e.what());
      }
    }
  }

  void add_buffers(nn::Module& m, const Fields& mf, const Where& at) {
    auto buffers = optional_array(mf.buffers, "buffers", at);
    if (!buffers) return;
    Where bw{&at, "buffers", 0};
    std::size_t i = 0;
    for (element b : *buffers) {
      Where w{&bw, nullptr, i++};
      if (b.type() != element_type::OBJECT) fail(w, "expected an object");
      const Fields f{object(b)};
      name_.assign(string_member(f.name, "name", w));
      bool persistent = true;
      if (f.persistent && f.persistent->type() == element_type::BOOL)
        persistent = bool(*f.persistent);
      try {
        m.register_buffer(name_, empty(shape(f, w), TensorOptions(dtype(f, w), kMeta)), persistent);
      } catch (const InputError&) {
        throw;  // already names the place
      } catch (const fsdp::Error& e) {
        fail(w, e.what());
      }
    }
  }

  // "attributes": {"num_heads": 4, "activation": "gelu", ...}: hyperparameters, kept as module
  // attributes named kHyperparameterPrefix + key (std::int64_t, double, bool or std::string);
  // other values are refused.
  void add_attributes(nn::Module& m, const Fields& f, const Where& at) {
    if (!f.attributes || is_null(*f.attributes)) return;
    const Where w{&at, "attributes", 0};
    if (f.attributes->type() != element_type::OBJECT) fail(w, "expected an object of values");
    for (auto kv : object(*f.attributes)) {
      const std::string key = kHyperparameterPrefix + std::string(kv.key);
      switch (kv.value.type()) {
        case element_type::INT64:
          m.set_attr(key, std::int64_t(kv.value));
          break;
        case element_type::UINT64:
          m.set_attr(key, static_cast<double>(std::uint64_t(kv.value)));
          break;
        case element_type::DOUBLE:
          m.set_attr(key, double(kv.value));
          break;
        case element_type::BOOL:
          m.set_attr(key, bool(kv.value));
          break;
        case element_type::STRING:
          m.set_attr(key, std::string(std::string_view(kv.value)));
          break;
        default:
          fail(w, fmt::format("attribute '{}': expected a number, a boolean or a string",
                              kv.key.size() > 64 ? std::string(kv.key.substr(0, 64)) + "..."
                                                 : std::string(kv.key)));
      }
    }
  }

  const nn::ModuleClass& module_class(const Fields& f, const Where& at) {
    const std::string_view type = string_member(f.type, "type", at);
    // Classes are interned by (name, ancestry); a model repeats a few classes a million times,
    // so look them up by their spelling here first.
    class_key_.assign(type);
    const bool has_bases = f.bases && !is_null(*f.bases);
    if (has_bases) {
      if (f.bases->type() != element_type::ARRAY)
        fail(Where{&at, "bases", 0}, "expected a list of class names");
      for (element n : array(*f.bases)) {
        if (n.type() != element_type::STRING)
          fail(Where{&at, "bases", 0}, "expected a list of class names");
        class_key_ += '\0';
        class_key_ += std::string_view(n);
      }
    } else {
      class_key_ += "\0\0known";
    }
    auto cit = classes_.find(class_key_);
    if (cit == classes_.end()) {
      std::vector<std::string> bases;
      if (has_bases)
        for (element n : array(*f.bases)) bases.emplace_back(std::string_view(n));
      else
        bases = known_bases(std::string(type));
      cit = classes_.emplace(class_key_, &nn::ModuleClass::from_names(std::string(type), bases))
                .first;
    }
    return *cit->second;
  }

  // A module with an id: refs name it; `open` while its definition is being read (a ref to it
  // then would make it contain itself).
  struct Defined {
    nn::ModulePtr module;
    bool open = true;
  };

  // The module defined by `f`, and its entry when it has an id.
  std::pair<nn::ModulePtr, Defined*> define(const Fields& f, const Where& at) {
    auto m = std::make_shared<nn::Module>(module_class(f, at));
    add_params(*m, f, at);
    add_buffers(*m, f, at);
    add_attributes(*m, f, at);
    Defined* entry = nullptr;
    if (auto id = optional_id(f.id, at)) {
      define_id(*id, at);
      entry = &modules_.emplace(*id, Defined{m}).first->second;
    }
    ++definitions_;
    return {std::move(m), entry};
  }

  // Depth-first in document order with an explicit stack (files may nest very deeply).
  nn::ModulePtr build(element root_obj, const Where& root_where) {
    struct Frame {
      nn::ModulePtr module;
      Defined* defined;  // null without an id
      const Where* where;
      array::iterator next, end;
      std::size_t index = 0;
      const Where* children_where = nullptr;
    };
    // Wheres that frames point at (a frame's own and its children list's).
    auto keep = [&](Where w) -> const Where* { return &wheres_.emplace_back(w); };
    auto open = [&](const Fields& f, const Where* w) -> Frame {
      Frame fr;
      fr.where = w;
      std::tie(fr.module, fr.defined) = define(f, *w);
      if (auto children = optional_array(f.children, "children", *w)) {
        fr.next = children->begin();
        fr.end = children->end();
        fr.children_where = keep(Where{w, "children", 0});
      }
      return fr;
    };
    if (root_obj.type() != element_type::OBJECT) fail(root_where, "expected a module object");
    const Fields root_fields{object(root_obj)};
    if (root_fields.ref) fail(root_where, "the root module cannot be a ref");
    std::vector<Frame> stack;
    stack.push_back(open(root_fields, &root_where));
    nn::ModulePtr root = stack.back().module;
    std::string name;
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (!f.children_where || f.next == f.end) {
        if (f.defined) f.defined->open = false;
        stack.pop_back();
        continue;
      }
      const element c = *f.next;
      ++f.next;
      const std::size_t i = f.index++;
      // Child Wheres are kept only for a child that opens a frame; the rest live here.
      Where cw{f.children_where, nullptr, i};
      if (c.type() != element_type::OBJECT) fail(cw, "expected {\"name\": ..., \"module\": ...}");
      const Fields cf{object(c)};
      name.assign(string_member(cf.name, "name", cw));
      if (!cf.module) fail(cw, "missing \"module\"");
      const element mobj = *cf.module;
      nn::ModulePtr child;
      std::optional<Frame> sub;
      if (mobj.type() != element_type::OBJECT) {
        fail(Where{&cw, "module", 0}, "expected a module object");
      } else if (const Fields mf{object(mobj)}; mf.ref) {
        Where mw{&cw, "module", 0};
        Where rw{&mw, "ref", 0};
        if (mf.ref->type() != element_type::STRING) fail(rw, "expected a string");
        const std::string_view ref(*mf.ref);
        auto it = modules_.find(ref);
        if (it == modules_.end()) undefined(rw, "module", ref);
        if (it->second.open)
          fail(rw, fmt::format("ref \"{}\" names an enclosing module: a module cannot contain "
                               "itself",
                               ref));
        child = it->second.module;
      } else {
        // The Where chain of the child's frame outlives this iteration: keep it.
        sub = open(mf, keep(Where{keep(cw), "module", 0}));
        child = sub->module;
      }
      try {
        f.module->register_module(name, child);
      } catch (const InputError&) {
        throw;  // already names the place
      } catch (const fsdp::Error& e) {
        fail(cw, e.what());
      }
      if (sub) {
        stack.push_back(std::move(*sub));  // invalidates f
      }
    }
    return root;
  }

  std::size_t definitions() const { return definitions_; }

 private:
  std::string source_;
  element doc_;
  // Ids are views into the parsed document, which outlives the builder.
  std::unordered_map<std::string_view, Defined> modules_;
  std::unordered_map<std::string_view, Tensor> params_;
  std::deque<Where> wheres_;  // stable addresses: frames point at them
  std::unordered_map<std::string, const nn::ModuleClass*> classes_;
  std::string class_key_, name_;
  std::size_t definitions_ = 0;
};

// nlohmann's account of a document simdjson rejected: a malformed one, with line and column.
// Returns the document re-serialised when nlohmann reads it (an integer beyond 64 bits, which
// it holds as a float), for simdjson to read again.
std::string explain_rejected(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text).dump();
  } catch (const nlohmann::json::out_of_range& e) {
    // "number overflow parsing '1e400'": nlohmann gives no position; find the token.
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    std::size_t at = 0;
    if (auto q = what.find('\''); q != std::string::npos) {
      auto q2 = what.find('\'', q + 1);
      if (q2 != std::string::npos) {
        auto found = text.find(what.substr(q + 1, q2 - q - 1));
        if (found != std::string::npos) at = found;
      }
    }
    auto [line, col] = line_and_column(text, at);
    throw InputError(fmt::format("{}:{}:{}: {}", source, line, col, what));
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's byte is one past the offending character.
    auto [line, col] = line_and_column(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error while
    // parsing value - invalid literal; last read: 'x'" -> keep the part after the position.
    if (auto p = what.find(": "); p != std::string::npos) what = what.substr(p + 2);
    throw InputError(fmt::format("{}:{}:{}: malformed JSON: {}", source, line, col, what));
  }
}

// Parses `len` bytes at `data`, followed by at least SIMDJSON_PADDING readable bytes when
// `padded`.
LoadedModel parse_buffer(const char* data, std::size_t len, bool padded,
                         const std::string& source) {
  const bool timing = fsdp::env::enabled("FSDP_PLAN_TIMING");
  std::clock_t c0 = std::clock();
  // simdjson bounds the nesting depth; a file that nests deeper than half its length is
  // malformed anyway, so that bound never refuses a good one (the depth arrays cost 9 bytes a
  // level of address space, touched only as deep as the document goes).
  auto parser = std::make_shared<simdjson::dom::parser>();
  element doc;
  simdjson::error_code err =
      parser->allocate(std::max<std::size_t>(len, 64), std::max<std::size_t>(len / 2 + 2, 1024));
  if (!err) err = parser->parse(data, len, !padded).get(doc);
  if (err) {
    std::string again = explain_rejected(std::string(data, len), source);
    if (parser->parse(again).get(doc) != simdjson::SUCCESS)
      throw InputError(fmt::format("{}: malformed JSON: {}", source, simdjson::error_message(err)));
  }
  if (timing)
    fmt::print(stderr, "fsdp-plan:   parse JSON: {:.3f} s cpu\n",
               static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
  if (doc.type() != element_type::OBJECT)
    throw InputError(
        fmt::format("{}: expected a JSON object {{\"format\": \"{}\", \"module\": ...}}", source,
                    kModelFormat));
  element format, module;
  bool has_format = false, has_module = false, has_model_type = false;
  for (auto kv : object(doc)) {
    if (kv.key == "format") format = kv.value, has_format = true;
    if (kv.key == "module") module = kv.value, has_module = true;
    if (kv.key == "model_type") has_model_type = true;
  }
  // A Hugging Face config under another name (fsdp-plan reads one by the name config.json).
  if (!has_format && has_model_type)
    throw InputError(fmt::format(
        "{}: missing \"format\" (expected \"{}\"); this looks like a Hugging Face config: "
        "fsdp-plan reads one named config.json or through its directory",
        source, kModelFormat));
  if (!has_format)
    throw InputError(fmt::format("{}: missing \"format\" (expected \"{}\")", source, kModelFormat));
  if (format.type() != element_type::STRING || std::string_view(format) != kModelFormat)
    throw InputError(fmt::format("{}: unknown format version {} (this planner reads \"{}\")",
                                 source, brief(format), kModelFormat));
  if (!has_module)
    throw InputError(fmt::format("{}: missing \"module\" (the root module)", source));
  c0 = std::clock();
  Builder b(source, doc);
  LoadedModel out;
  out.root = b.build(module, Where{nullptr, "module", 0});
  out.num_definitions = b.definitions();
  if (timing)
    fmt::print(stderr, "fsdp-plan:   build modules: {:.3f} s cpu\n",
               static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
  out.document = std::move(parser);
  return out;
}

}  // namespace

LoadedModel parse_model(const std::string& text, const std::string& source) {
  return parse_buffer(text.data(), text.size(),
                      text.capacity() - text.size() >= simdjson::SIMDJSON_PADDING, source);
}

LoadedModel load_model(const std::string& path) {
  // Regular files, pipes and devices alike (`fsdp-plan <(gen_model)`, /dev/stdin): read to the
  // end in blocks.
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f)
    throw InputError(fmt::format("{}: cannot open the model file: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(::fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    std::fclose(f);
    throw InputError(fmt::format("{}: cannot read the model file: it is a directory", path));
  }
  std::string text;
  if (S_ISREG(st.st_mode) && st.st_size > 0)
    text.reserve(static_cast<std::size_t>(st.st_size) + simdjson::SIMDJSON_PADDING);
  char buf[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err)
    throw InputError(fmt::format("{}: cannot read the model file: {}", path, std::strerror(err)));
  // simdjson reads up to SIMDJSON_PADDING bytes past the end: give it zeros there.
  const std::size_t len = text.size();
  text.append(simdjson::SIMDJSON_PADDING, '\0');
  return parse_buffer(text.data(), len, true, path);
}

}  // namespace fsdp::plan
