#include "policies/policy_expr.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>

#include "core/input_error.h"
#include "core/suggest.h"

namespace fsdp::policies {

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names{"always",       "size",    "transformer",
                                              "individually", "modules", "or"};
  return names;
}

namespace {

std::string join_classes(const std::vector<ClassRef>& cs) {
  std::string s = "[";
  for (std::size_t i = 0; i < cs.size(); ++i) s += (i ? ", " : "") + cs[i].name;
  return s + "]";
}

class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  PolicyExpr parse() {
    skip_space();
    if (pos_ == text_.size()) fail(pos_, "empty policy (expected one of " + names_list() + ")");
    PolicyExpr e = expr();
    skip_space();
    if (pos_ != text_.size())
      fail(pos_, fmt::format("unexpected '{}' after the end of the policy", text_.substr(pos_)));
    return e;
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& msg) const {
    // A policy of a megabyte is quoted by its start: the message stays one readable line.
    const std::string quoted = text_.size() > 200 ? text_.substr(0, 200) + "..." : text_;
    throw InputError(fmt::format("--policy '{}': column {}: {}", quoted, at + 1, msg));
  }

  static std::string names_list() {
    std::string s;
    for (const auto& n : policy_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool peek(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }

  std::string found() const {
    if (pos_ >= text_.size()) return "the end";
    return fmt::format("'{}'", text_[pos_]);
  }

  void expect(char c, const std::string& context) {
    if (!peek(c)) fail(pos_, fmt::format("expected '{}' {}, found {}", c, context, found()));
    ++pos_;
  }

  static bool ident_start(char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
  }
  static bool ident_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
  }

  std::string ident(const std::string& what) {
    skip_space();
    if (pos_ >= text_.size() || !ident_start(text_[pos_]))
      fail(pos_, fmt::format("expected {}, found {}", what, found()));
    std::size_t b = pos_;
    while (pos_ < text_.size() && ident_char(text_[pos_])) ++pos_;
    return text_.substr(b, pos_ - b);
  }

  PolicyExpr expr() {
    skip_space();
    std::size_t at = pos_;
    // Every later step (canonical spelling, building, evaluating per module) follows the
    // nesting, so it is bounded here: the stack and the time stay small whatever the input.
    if (depth_ > kMaxPolicyDepth)
      fail(at, fmt::format("policies nested more than {} deep in or(...); list them in one "
                           "or(A, B, C) instead",
                           kMaxPolicyDepth));
    struct Nest {
      int& d;
      explicit Nest(int& depth) : d(++depth) {}
      ~Nest() { --d; }
    } nest(depth_);
    std::string name = ident("a policy name (" + names_list() + ")");
    PolicyExpr e;
    e.column = at + 1;
    if (name == "always") {
      e.kind = PolicyExpr::Kind::Always;
      if (peek('(')) {
        ++pos_;
        expect(')', "(always takes no arguments)");
      }
    } else if (name == "size") {
      e.kind = PolicyExpr::Kind::Size;
      if (peek('(')) size_args(e);
    } else if (name == "transformer" || name == "individually" || name == "modules") {
      e.kind = name == "transformer"    ? PolicyExpr::Kind::Transformer
               : name == "individually" ? PolicyExpr::Kind::Individually
                                        : PolicyExpr::Kind::Modules;
      class_list_args(e, name);
    } else if (name == "or") {
      e.kind = PolicyExpr::Kind::Or;
      expect('(', "after 'or'");
      if (peek(')'))
        fail(pos_,
             "or() needs at least one policy, e.g. or(size(min_num_params=1e6), "
             "transformer([Block]))");
      for (;;) {
        e.operands.push_back(expr());
        if (peek(',')) {
          ++pos_;
          if (peek(')')) break;  // trailing comma
          continue;
        }
        break;
      }
      expect(')', "to close or(...)");
    } else {
      fail(at, fmt::format("unknown policy '{}'{}; policies are {}", name,
                           did_you_mean(name, policy_names()), names_list()));
    }
    return e;
  }

  // `[A, B]` (a trailing comma is allowed); dotted names keep their last component, so that
  // torch.nn.Linear means Linear.
  std::vector<ClassRef> class_list(const std::string& what) {
    skip_space();
    if (!peek('['))
      fail(pos_,
           fmt::format("expected a list of class names [A, B] for {}, found {}", what, found()));
    ++pos_;
    std::vector<ClassRef> out;
    while (!peek(']')) {
      skip_space();
      std::size_t at = pos_;
      std::string n = ident("a class name");
      if (n.back() == '.') fail(at, fmt::format("'{}' is not a class name", n));
      if (auto dot = n.rfind('.'); dot != std::string::npos) n = n.substr(dot + 1);
      out.push_back({n, at + 1});
      if (peek(',')) {
        ++pos_;
        continue;
      }
      if (!peek(']'))
        fail(pos_,
             fmt::format("expected ',' or ']' in the list of class names, found {}", found()));
    }
    ++pos_;
    return out;
  }

  void class_list_args(PolicyExpr& e, const std::string& name) {
    static const std::vector<std::string> keywords{"transformer_layer_cls", "module_classes"};
    expect('(', fmt::format("after '{}' ({}([A, B]))", name, name));
    skip_space();
    // An optional keyword, as in upstream's signatures.
    std::size_t save = pos_;
    if (pos_ < text_.size() && ident_start(text_[pos_])) {
      std::string kw = ident("");
      if (peek('=')) {
        if (kw != "transformer_layer_cls" && kw != "module_classes")
          fail(save, fmt::format("unknown argument '{}' of {}(){}", kw, name,
                                 did_you_mean(kw, keywords)));
        ++pos_;
      } else {
        pos_ = save;
      }
    }
    e.classes = class_list(name + "()");
    if (peek(',')) ++pos_;
    expect(')', fmt::format("to close {}(...), which takes one list of class names", name));
  }

  std::int64_t integer(const std::string& what) {
    skip_space();
    std::size_t at = pos_;
    std::string digits;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.' ||
            text_[pos_] == '_' || text_[pos_] == '+' || text_[pos_] == '-')) {
      if (text_[pos_] != '_') digits += text_[pos_];
      ++pos_;
    }
    if (digits.empty()) fail(at, fmt::format("expected a number for {}, found {}", what, found()));
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(digits, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != digits.size() || !std::isfinite(v))
      fail(at, fmt::format("{} must be a number such as 100000 or 1e8, got '{}'", what, digits));
    if (v < 0 || v != std::floor(v) || v > 9.2e18)
      fail(at, fmt::format("{} must be a non-negative integer, got {}", what, digits));
    return static_cast<std::int64_t>(v);
  }

  void size_args(PolicyExpr& e) {
    static const std::vector<std::string> keywords{"min_num_params", "force_leaf", "exclude_wrap",
                                                   "force_leaf_modules", "exclude_wrap_modules"};
    expect('(', "after 'size'");
    bool first = true;
    std::vector<std::string> seen;
    while (!peek(')')) {
      skip_space();
      std::size_t at = pos_;
      if (first && pos_ < text_.size() &&
          (std::isdigit(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.')) {
        e.min_num_params = integer("min_num_params");  // size(1e8)
        seen.push_back("min_num_params");
      } else {
        std::string kw = ident("an argument (min_num_params=, force_leaf=, exclude_wrap=)");
        std::string canon = kw == "force_leaf_modules"     ? "force_leaf"
                            : kw == "exclude_wrap_modules" ? "exclude_wrap"
                                                           : kw;
        if (canon != "min_num_params" && canon != "force_leaf" && canon != "exclude_wrap")
          fail(at, fmt::format("unknown argument '{}' of size(){}; it takes min_num_params=, "
                               "force_leaf=, exclude_wrap=",
                               kw, did_you_mean(kw, keywords)));
        for (const auto& s : seen)
          if (s == canon) fail(at, fmt::format("size() got '{}' twice", canon));
        seen.push_back(canon);
        expect('=', fmt::format("after '{}'", kw));
        if (canon == "min_num_params")
          e.min_num_params = integer("min_num_params");
        else if (canon == "force_leaf")
          e.force_leaf = class_list("force_leaf");
        else
          e.exclude_wrap = class_list("exclude_wrap");
      }
      first = false;
      if (peek(',')) {
        ++pos_;
        continue;
      }
      if (!peek(')'))
        fail(pos_, fmt::format("expected ',' or ')' in size(...), found {}", found()));
    }
    ++pos_;
  }

  const std::string& text_;
  std::size_t pos_ = 0;
  int depth_ = 0;  // or(...) nesting of the expression being parsed
};

}  // namespace

PolicyExpr parse_policy(const std::string& text) {
  return Parser(text).parse();
}

std::string PolicyExpr::str() const {
  switch (kind) {
    case Kind::Always:
      return "always";
    case Kind::Size: {
      std::string s = fmt::format("size(min_num_params={}", min_num_params);
      if (force_leaf) s += ", force_leaf=" + join_classes(*force_leaf);
      if (exclude_wrap) s += ", exclude_wrap=" + join_classes(*exclude_wrap);
      return s + ")";
    }
    case Kind::Transformer:
      return "transformer(" + join_classes(classes) + ")";
    case Kind::Individually:
      return "individually(" + join_classes(classes) + ")";
    case Kind::Modules:
      return "modules(" + join_classes(classes) + ")";
    case Kind::Or: {
      std::string s = "or(";
      for (std::size_t i = 0; i < operands.size(); ++i) s += (i ? ", " : "") + operands[i].str();
      return s + ")";
    }
  }
  return "?";
}

std::vector<ClassRef> PolicyExpr::class_refs() const {
  std::vector<ClassRef> out;
  std::vector<const PolicyExpr*> stack{this};
  // Operands in order: walk a reversed stack.
  while (!stack.empty()) {
    const PolicyExpr* e = stack.back();
    stack.pop_back();
    out.insert(out.end(), e->classes.begin(), e->classes.end());
    if (e->force_leaf) out.insert(out.end(), e->force_leaf->begin(), e->force_leaf->end());
    if (e->exclude_wrap) out.insert(out.end(), e->exclude_wrap->begin(), e->exclude_wrap->end());
    for (auto it = e->operands.rbegin(); it != e->operands.rend(); ++it) stack.push_back(&*it);
  }
  return out;
}

}  // namespace fsdp::policies
