#include "tools/plan/model_file.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "tools/plan/known_classes.h"

namespace fsdp::plan {

using nlohmann::json;

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

// A JSON value for a message: at most a few levels and about 60 characters, whatever the value
// (a value nested 100 000 deep or a megabyte long is shown by its start, never serialised whole).
void brief_into(const json& v, int depth, std::string& out) {
  constexpr std::size_t kMax = 60;
  if (v.is_array() || v.is_object()) {
    if (depth >= 3) {
      out += v.is_array() ? "[...]" : "{...}";
      return;
    }
    out += v.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) {
        if (out.size() > kMax) {
          out += ",...";
          break;
        }
        out += ',';
      }
      first = false;
      if (v.is_object()) out += json(it.key()).dump() + ':';
      brief_into(*it, depth + 1, out);
    }
    out += v.is_array() ? ']' : '}';
  } else {
    out += v.dump();
  }
}

std::string brief(const json& v) {
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
    std::string s = parent ? parent->str() : "";
    if (key) {
      if (!s.empty()) s += '.';
      s += key;
    } else {
      s +=
          '[';  // appended piecewise: "[" + to_string(...) trips a GCC 12 -Wrestrict false positive
      s += std::to_string(index);
      s += ']';
    }
    return s;
  }
};

class Builder {
 public:
  explicit Builder(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const Where& at, const std::string& msg) const {
    throw InputError(fmt::format("{}: at {}: {}", source_, at.str(), msg));
  }

  const json& member(const json& obj, const char* key, const Where& at) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail(at, fmt::format("missing \"{}\"", key));
    return *it;
  }

  const std::string& string_member(const json& obj, const char* key, const Where& at) const {
    const json& v = member(obj, key, at);
    if (!v.is_string())
      fail(Where{&at, key, 0}, fmt::format("expected a string, got {}", brief(v)));
    return v.get_ref<const std::string&>();
  }

  const json* optional_array(const json& obj, const char* key, const Where& at) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    if (!it->is_array()) fail(Where{&at, key, 0}, "expected a list");
    return &*it;
  }

  Shape shape(const json& obj, const Where& at) const {
    Where w{&at, "shape", 0};
    const json& s = member(obj, "shape", at);
    if (!s.is_array()) fail(w, fmt::format("shape must be a list of integers, got {}", brief(s)));
    Shape out;
    out.reserve(s.size());
    std::int64_t numel = 1;
    for (const auto& d : s) {
      bool ok = d.is_number_integer() && (d.is_number_unsigned() || d.get<std::int64_t>() >= 0);
      if (!ok || (d.is_number_unsigned() && d.get<std::uint64_t>() > INT64_MAX))
        fail(w, fmt::format("shape must be a list of non-negative integers, got {}", brief(s)));
      std::int64_t v = d.get<std::int64_t>();
      if (__builtin_mul_overflow(numel, v, &numel))
        fail(w, fmt::format("shape {} has more than 2^63 elements", brief(s)));
      out.push_back(v);
    }
    return out;
  }

  DType dtype(const json& obj, const Where& at) const {
    auto it = obj.find("dtype");
    if (it == obj.end() || it->is_null()) return DType::Float32;
    if (!it->is_string()) fail(Where{&at, "dtype", 0}, "expected a string");
    try {
      return dtype_from_name(it->get_ref<const std::string&>());
    } catch (const std::invalid_argument& e) {
      fail(Where{&at, "dtype", 0}, e.what());
    }
  }

  // Collects every id defined anywhere, so that a ref to a later definition gets a clearer
  // message than "undefined".
  void scan_ids(const json& root) {
    std::vector<const json*> stack{&root};
    while (!stack.empty()) {
      const json* j = stack.back();
      stack.pop_back();
      if (j->is_object()) {
        auto id = j->find("id");
        if (id != j->end() && id->is_string()) all_ids_.insert(id->get<std::string>());
        for (auto it = j->begin(); it != j->end(); ++it)
          if (it->is_structured()) stack.push_back(&*it);
      } else if (j->is_array()) {
        for (const auto& e : *j)
          if (e.is_structured()) stack.push_back(&e);
      }
    }
  }

  [[noreturn]] void undefined(const Where& at, const std::string& kind, const std::string& id) {
    if (all_ids_.count(id))
      fail(at, fmt::format("ref \"{}\" is used before the {} with id \"{}\" is defined (define "
                           "it first, then refer to it)",
                           id, kind, id));
    fail(at, fmt::format("ref \"{}\" names no {} (no {} in the file has \"id\": \"{}\")", id, kind,
                         kind, id));
  }

  std::optional<std::string> optional_id(const json& obj, const Where& at) const {
    auto it = obj.find("id");
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) fail(Where{&at, "id", 0}, "expected a string");
    return it->get<std::string>();
  }

  void add_params(nn::Module& m, const json& obj, const Where& at) {
    const json* params = optional_array(obj, "params", at);
    if (!params) return;
    Where pw{&at, "params", 0};
    for (std::size_t i = 0; i < params->size(); ++i) {
      const json& p = (*params)[i];
      Where w{&pw, nullptr, i};
      if (!p.is_object()) fail(w, "expected an object");
      const std::string& name = string_member(p, "name", w);
      Tensor t;
      bool requires_grad = true;
      if (auto r = p.find("ref"); r != p.end()) {
        if (!r->is_string()) fail(Where{&w, "ref", 0}, "expected a string");
        auto it = params_.find(r->get<std::string>());
        if (it == params_.end()) undefined(Where{&w, "ref", 0}, "parameter", *r);
        t = it->second;
        requires_grad = t.requires_grad() || !t.is_floating_point();
      } else {
        DType dt = dtype(p, w);
        t = empty(shape(p, w), TensorOptions(dt, kMeta));
        if (auto rg = p.find("requires_grad"); rg != p.end() && !rg->is_null()) {
          if (!rg->is_boolean()) fail(Where{&w, "requires_grad", 0}, "expected true or false");
          requires_grad = rg->get<bool>();
        }
        if (auto id = optional_id(p, w)) {
          if (params_.count(*id) || modules_.count(*id))
            fail(Where{&w, "id", 0}, fmt::format("id \"{}\" is defined twice", *id));
          params_.emplace(*id, t);
        }
      }
      try {
        m.register_parameter(name, t, requires_grad);
      } catch (const InputError&) {
        throw;  // already names the place
      } catch (const fsdp::Error& e) {
        fail(w, e.what());
      }
    }
  }

  void add_buffers(nn::Module& m, const json& obj, const Where& at) {
    const json* buffers = optional_array(obj, "buffers", at);
    if (!buffers) return;
    Where bw{&at, "buffers", 0};
    for (std::size_t i = 0; i < buffers->size(); ++i) {
      const json& b = (*buffers)[i];
      Where w{&bw, nullptr, i};
      if (!b.is_object()) fail(w, "expected an object");
      const std::string& name = string_member(b, "name", w);
      bool persistent = true;
      if (auto ps = b.find("persistent"); ps != b.end() && ps->is_boolean()) persistent = *ps;
      try {
        m.register_buffer(name, empty(shape(b, w), TensorOptions(dtype(b, w), kMeta)), persistent);
      } catch (const InputError&) {
        throw;  // already names the place
      } catch (const fsdp::Error& e) {
        fail(w, e.what());
      }
    }
  }

  nn::ModulePtr define(const json& obj, const Where& at) {
    const std::string& type = string_member(obj, "type", at);
    // Classes are interned by (name, ancestry); a model repeats a few classes a million times,
    // so look them up by their spelling here first.
    class_key_ = type;
    const json* bases_json = nullptr;
    if (auto b = obj.find("bases"); b != obj.end() && !b->is_null()) {
      if (!b->is_array()) fail(Where{&at, "bases", 0}, "expected a list of class names");
      bases_json = &*b;
      for (const auto& n : *b) {
        if (!n.is_string()) fail(Where{&at, "bases", 0}, "expected a list of class names");
        class_key_ += '\0';
        class_key_ += n.get_ref<const std::string&>();
      }
    } else {
      class_key_ += "\0\0known";
    }
    auto cit = classes_.find(class_key_);
    if (cit == classes_.end()) {
      std::vector<std::string> bases;
      if (bases_json)
        for (const auto& n : *bases_json) bases.push_back(n.get<std::string>());
      else
        bases = known_bases(type);
      cit = classes_.emplace(class_key_, &nn::ModuleClass::from_names(type, bases)).first;
    }
    auto m = std::make_shared<nn::Module>(*cit->second);
    add_params(*m, obj, at);
    add_buffers(*m, obj, at);
    if (auto id = optional_id(obj, at)) {
      if (params_.count(*id) || modules_.count(*id))
        fail(Where{&at, "id", 0}, fmt::format("id \"{}\" is defined twice", *id));
      modules_.emplace(*id, m);
    }
    ++definitions_;
    return m;
  }

  // Depth-first in document order with an explicit stack (files may nest very deeply).
  nn::ModulePtr build(const json& doc) {
    scan_ids(doc);
    struct Frame {
      const json* obj;
      nn::ModulePtr module;
      std::unique_ptr<Where> where;
      std::size_t next_child = 0;
      const json* children = nullptr;
      std::unique_ptr<Where> children_where;
    };
    Where root_where{nullptr, "module", 0};
    if (!doc.contains("module"))
      throw InputError(fmt::format("{}: missing \"module\" (the root module)", source_));
    const json& root_obj = doc["module"];
    auto open = [&](const json& obj, std::unique_ptr<Where> w) -> std::optional<Frame> {
      if (!obj.is_object()) fail(*w, "expected a module object");
      if (auto r = obj.find("ref"); r != obj.end()) {
        (void)r;
        return std::nullopt;
      }
      Frame f;
      f.obj = &obj;
      f.where = std::move(w);
      f.module = define(obj, *f.where);
      f.children = optional_array(obj, "children", *f.where);
      f.children_where = std::make_unique<Where>(Where{f.where.get(), "children", 0});
      return f;
    };
    auto root_frame = open(root_obj, std::make_unique<Where>(root_where));
    if (!root_frame) fail(root_where, "the root module cannot be a ref");
    nn::ModulePtr root = root_frame->module;
    std::vector<Frame> stack;
    std::unordered_set<const nn::Module*> open_modules{root.get()};
    stack.push_back(std::move(*root_frame));
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (!f.children || f.next_child == f.children->size()) {
        open_modules.erase(f.module.get());
        stack.pop_back();
        continue;
      }
      std::size_t i = f.next_child++;
      const json& c = (*f.children)[i];
      auto cw = std::make_unique<Where>(Where{f.children_where.get(), nullptr, i});
      if (!c.is_object()) fail(*cw, "expected {\"name\": ..., \"module\": ...}");
      const std::string& name = string_member(c, "name", *cw);
      const json& mobj = member(c, "module", *cw);
      auto mw = std::make_unique<Where>(Where{cw.get(), "module", 0});
      nn::ModulePtr child;
      std::optional<Frame> sub;
      if (mobj.is_object() && mobj.contains("ref")) {
        const json& r = mobj["ref"];
        Where rw{mw.get(), "ref", 0};
        if (!r.is_string()) fail(rw, "expected a string");
        auto it = modules_.find(r.get<std::string>());
        if (it == modules_.end()) undefined(rw, "module", r.get<std::string>());
        if (open_modules.count(it->second.get()))
          fail(rw, fmt::format("ref \"{}\" names an enclosing module: a module cannot contain "
                               "itself",
                               r.get<std::string>()));
        child = it->second;
      } else {
        sub = open(mobj, std::move(mw));
        child = sub->module;
      }
      try {
        f.module->register_module(name, child);
      } catch (const InputError&) {
        throw;  // already names the place
      } catch (const fsdp::Error& e) {
        fail(*cw, e.what());
      }
      if (sub) {
        // The Where chain of the child frame points into this frame's heap-allocated Wheres,
        // which stay put while the vector grows.
        owned_wheres_.push_back(std::move(cw));
        open_modules.insert(sub->module.get());
        stack.push_back(std::move(*sub));
      }
    }
    return root;
  }

  std::size_t definitions() const { return definitions_; }

 private:
  std::string source_;
  std::unordered_set<std::string> all_ids_;
  std::unordered_map<std::string, nn::ModulePtr> modules_;
  std::unordered_map<std::string, Tensor> params_;
  std::vector<std::unique_ptr<Where>> owned_wheres_;
  std::unordered_map<std::string, const nn::ModuleClass*> classes_;
  std::string class_key_;
  std::size_t definitions_ = 0;
};

}  // namespace

LoadedModel parse_model(const std::string& text, const std::string& source) {
  json doc;
  std::clock_t c0 = std::clock();
  try {
    doc = json::parse(text);
    if (std::getenv("FSDP_PLAN_TIMING"))
      fmt::print(stderr, "fsdp-plan:   parse JSON: {:.3f} s cpu\n",
                 static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
  } catch (const json::out_of_range& e) {
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
  } catch (const json::parse_error& e) {
    // nlohmann's byte is one past the offending character.
    auto [line, col] = line_and_column(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error while
    // parsing value - invalid literal; last read: 'x'" -> keep the part after the position.
    if (auto p = what.find(": "); p != std::string::npos) what = what.substr(p + 2);
    throw InputError(fmt::format("{}:{}:{}: malformed JSON: {}", source, line, col, what));
  }
  if (!doc.is_object())
    throw InputError(
        fmt::format("{}: expected a JSON object {{\"format\": \"{}\", \"module\": ...}}", source,
                    kModelFormat));
  auto fmt_it = doc.find("format");
  if (fmt_it == doc.end())
    throw InputError(fmt::format("{}: missing \"format\" (expected \"{}\")", source, kModelFormat));
  if (!fmt_it->is_string() || fmt_it->get<std::string>() != kModelFormat)
    throw InputError(fmt::format("{}: unknown format version {} (this planner reads \"{}\")",
                                 source, brief(*fmt_it), kModelFormat));
  Builder b(source);
  LoadedModel out;
  c0 = std::clock();
  out.root = b.build(doc);
  out.num_definitions = b.definitions();
  out.document = std::make_shared<const json>(std::move(doc));
  if (std::getenv("FSDP_PLAN_TIMING"))
    fmt::print(stderr, "fsdp-plan:   build modules: {:.3f} s cpu\n",
               static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
  return out;
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
  if (S_ISREG(st.st_mode) && st.st_size > 0) text.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err)
    throw InputError(fmt::format("{}: cannot read the model file: {}", path, std::strerror(err)));
  return parse_model(text, path);
}

}  // namespace fsdp::plan
