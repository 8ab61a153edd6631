#!/usr/bin/env python3
"""Trains two small byte-level BPE tokenizers offline with Hugging Face `tokenizers` (no hub) and
writes tests/fixtures/tokenizers/: each tokenizer.json and what HF does with it (the expected ids
and decodes that tests/models/test_tokenizer.cpp compares against).

  gpt2_style/   ByteLevel pre-tokenizer (GPT-2's regex), <|endoftext|> special, merges written in
                the legacy "a b" string form (as GPT-2's hub tokenizer.json has them)
  llama3_style/ Split(Llama 3's regex, Isolated) + ByteLevel(use_regex=false), ignore_merges,
                TemplateProcessing prefixing <|begin_of_text|>, several special tokens,
                non-special added tokens, added tokens outside the byte table ("→→", "<| sp |>"),
                and a vocabulary word no merge reaches ("zqxj"), so that ignore_merges changes
                the result
  corpus.txt    a test text for tokenize's end-to-end test

Each expected.json holds HF's results on the fixed CASES and on 40 random texts (seed 26) drawn
from POOL, every text encoded three ways and decoded two ways, plus its pre-tokens.

Run with /opt/torch2/bin/python (tokenizers 0.23): python make_tokenizer_fixtures.py [OUT_DIR]
"""
import json
import os
import random
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

GPT2_REGEX = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>", "<|eot_id|>!"]

# Training text: English, code, digits, CRLF, tabs, runs of spaces, accents, CJK, emoji,
# contractions in several cases.
TRAIN = [
    "The quick brown fox jumps over the lazy dog. It's a dog's life, isn't it? We'll see.",
    "I'M SURE THEY'RE RIGHT, BUT YOU'VE GOT TO ADMIT IT'S ODD. She'd known; he'll learn.",
    "def main(argc, argv):\n    for i in range(10):\n        print(f\"{i}: {argv[i]}\")\n",
    "int main(void) {\n\treturn printf(\"%d\\n\", 42);\n}\n",
    "Line one\r\nLine two\r\n\r\nLine four\r\n",
    "Numbers: 0 1 12 123 1234 12345 3.14159 2026-11-27 1,000,000 $19.99 50%",
    "Café, naïve, résumé, façade, Ångström, über, São Paulo, jalapeño, coöperate.",
    "日本語のテキストと中文文本，还有한국어 텍스트도 있습니다。",
    "Emoji: 😀 🎉 👍🏽 🇫🇷 ❤️ and symbols: © ® ™ € £ ¥ → ← ∑ ∞ ≠ ≤ ≥",
    "Tabs\tand\t\tmore\ttabs; spaces:  two   three    four     five.",
    "Привет, мир! Γειά σου κόσμε! مرحبا بالعالم! שלום עולם!",
    "class Tokenizer:\n    def encode(self, text: str) -> list[int]:\n        return []\n",
    "x = [1, 2, 3]; y = {'a': 1, 'b': 2}; z = (x, y) # comment",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "<html><body><p class=\"intro\">Hello, world!</p></body></html>",
    "Don't, DON'T, Won't, WON'T, you're, YOU'RE, we've, WE'VE, I'd, I'D, they'll, THEY'LL.",
]
# Texts to encode (not all seen in training), special tokens among them.
CASES = [
    "",
    "Hello world",
    "a   b",
    "IT'S",
    "it's It's IT'S iT's",
    " 12345",
    "1234567890 and 3.14159 and 2026",
    "Line one\r\nLine two\r\n\r\n",
    "\t\tindented\n    four spaces\n\n\n",
    "   leading and trailing   ",
    "Café naïve résumé Ångström",
    "日本語のテキスト 中文 한국어",
    "Emoji 😀🎉 👍🏽 🇫🇷 ❤️!",
    "def f(x):\n    return x ** 2  # square\n",
    "They'll say I'M RIGHT; you'd've known.",
    "<|endoftext|>First document.<|endoftext|>Second one.",
    "<|begin_of_text|>Hi<|eot_id|>there<|end_of_text|>",
    "<|eot_id|>!<|eot_id|>?",
    "text with <custom> added token and <custom><custom>",
    "a→→b <| sp |> c → and →→→",
    "zqxj zqxj zqxjzqxj",
    "\u00a0non-breaking\u00a0space and \u2028 line separator and \u0085 next line",
    "combining: e\u0301 a\u0308 and digits: \u0663\u0664\u0665 \u00bd\u216b",
    "curly ’quotes’ and ‘single’ and “double”",
    "mixed\r\n\ttabs\r\n  and  \r\n CRLF",
    "!!!???...,,,;;;:::",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "Привет мир Γειά σου",
    "\n",
    " ",
    "    ",
    # Code points whose classes tokenizers' Oniguruma (Unicode 16) and PCRE2 10.42 (Unicode 14)
    # read differently: letters of CJK Ext. H and I and of newer scripts, Garay and Kirat Rai
    # digits, U+180E (no longer a space).
    "\U00031350's \U0002EBF0't x\U000323AF're \u1c89'll \ua7cb\ua7cc'd \U000105C0'VE",
    "\U00010D40\U00010D41\U00010D42\U00010D43 \U00016D70\U00016D71 7\U00010D49",
    "a\u180eb \u180e c\u180e\u180e d \u180e",
]


# Random texts over pools of characters that the regexes treat differently (letters of several
# scripts, digits of several systems, spaces and line breaks of several kinds, marks, symbols,
# emoji, apostrophes, pieces of special tokens); the code points where PCRE2's Unicode tables
# and Oniguruma's differ (hf-models.md section 6) have their own CASES.
POOL = (list("abcXYZ") + list("0123456789") + list(" \t\n\r") +
        list(".,;:!?'\"()[]{}<>|_-+=*/#$%&@^~`\\") +
        ["\u00a0", "\u2028", "\u0085", "\u3000", "\u2003", "\u000b", "\u000c"] +
        list("éàüßøñçÅ") + list("αβΓΔωЖжЯ") + list("日本語中文한국어") + list("٣٤٥½Ⅻ²") +
        ["\u0301", "\u0308", "’", "‘", "“", "—", "…", "€", "©"] +
        ["😀", "🎉", "👍🏽", "🇫🇷", "🦀", "\u200d", "\ufe0f"] +
        ["'s", "'T", "'re", "'VE", "'m", "'LL", "'d", "  ", "   ", "\r\n", "\n\n", "123456"] +
        ["<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>!", "<custom>", "zqxj",
         "<|", "|>", "<|eot", "→", "<| sp |>"])


def random_cases(n, seed=26):
    rng = random.Random(seed)
    return ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 40))) for _ in range(n)]


TEXTS = CASES + random_cases(40)


def extra_training_text():
    """More English and code, present on every Debian machine with this Python: a license text
    and a standard-library module, so that ~1000 merges are learnt."""
    paths = ["/usr/share/common-licenses/Apache-2.0", os.path.join(os.path.dirname(json.__file__),
                                                                  "encoder.py")]
    lines = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            lines += f.read().splitlines(keepends=True)
    return lines


def train(kind):
    if kind == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        specials, vocab_size = ["<|endoftext|>"], 256 + 1 + 1000
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials, vocab_size = LLAMA3_SPECIALS, 256 + len(LLAMA3_SPECIALS) + 700
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(TRAIN * 3 + extra_training_text(), trainer)
    if kind == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                special_tokens=[("<|begin_of_text|>", bos)])])
        # Non-special (normalized=True: matched in the second pass) and special added tokens,
        # two of them with characters outside the byte table (decoded as their own UTF-8).
        tok.add_tokens(["<custom>", "→→"])
        tok.add_special_tokens(["<| sp |>"])
    j = json.loads(tok.to_str())
    if kind == "gpt2":
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    else:
        # A vocabulary word that no merge reaches: ignore_merges emits it whole.
        # Added after the model's vocabulary; tokenizers then renumbers the added tokens that
        # follow it ("<custom>"), which a round trip through it writes out.
        vocab = j["model"]["vocab"]
        vocab["zqxj"] = len(vocab)
        j = json.loads(Tokenizer.from_str(json.dumps(j)).to_str())
    return j


def expectations(j):
    tok = Tokenizer.from_str(json.dumps(j))
    cases = []
    for text in TEXTS:
        with_special = tok.encode(text, add_special_tokens=True).ids
        tok.encode_special_tokens = True
        split_special = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        cases.append({
            "text": text,
            "ids": with_special,
            "ids_no_special": tok.encode(text, add_special_tokens=False).ids,
            "ids_split_special": split_special,
            "decode": tok.decode(with_special, skip_special_tokens=False),
            "decode_skip_special": tok.decode(with_special, skip_special_tokens=True),
        })
    # Lossy decoding: each token of multi-byte characters alone, and cut sequences.
    lossy = []
    for text in ["龍虎", "🦀𝄞", "Ѯѱ", "👍🏽", "日本語"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        for cut in [ids[:1], ids[1:], ids[:-1], ids[-1:], ids[::-1]]:
            lossy.append({"ids": cut, "decode": tok.decode(cut, skip_special_tokens=False)})
    pre = tok.pre_tokenizer
    pre_tokens = {t: [p for p, _ in pre.pre_tokenize_str(t)] for t in TEXTS}
    # The same file with ignore_merges flipped (Llama 3 style only).
    flipped = None
    if j["model"].get("ignore_merges"):
        jf = json.loads(json.dumps(j))
        jf["model"]["ignore_merges"] = False
        tf = Tokenizer.from_str(json.dumps(jf))
        flipped = {t: tf.encode(t, add_special_tokens=False).ids for t in TEXTS}
    return {"generator": "tools/torch_reference/make_tokenizer_fixtures.py",
            "tokenizers_version": tokenizers.__version__,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "cases": cases, "lossy": lossy, "pre_tokens": pre_tokens,
            "ids_without_ignore_merges": flipped}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        here, "..", "..", "tests", "fixtures", "tokenizers")
    for kind in ["gpt2", "llama3"]:
        d = os.path.join(out, f"{kind}_style")
        os.makedirs(d, exist_ok=True)
        j = train(kind)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(j, ensure_ascii=False, separators=(",", ":")) + "\n")
        e = expectations(j)
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n")
        if e["ids_without_ignore_merges"]:
            differ = [t for t, c in zip(TEXTS, e["cases"])
                      if c["ids_no_special"] != e["ids_without_ignore_merges"][t]]
            print(f"{kind}: ignore_merges changes {len(differ)} case(s): {differ[:3]}")
    with open(os.path.join(out, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(CASES[1:15]) + "\n")


if __name__ == "__main__":
    main()
