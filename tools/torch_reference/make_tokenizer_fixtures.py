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
  llama2_style/ SentencePiece-style BPE as transformers' LlamaConverter writes Llama 2's,
                TinyLlama's and Mistral 7B v0.1's: normalizer Sequence[Prepend("▁"), Replace(" ",
                "▁")], no pre-tokenizer, BPE with byte_fallback, unk_token "<unk>" and fuse_unk,
                the 256 "<0xXX>" tokens after <unk> <s> </s>, merges as "a b" strings; decoder
                Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)]; "<s> $A"
  metaspace_style/ the same vocabulary in the newer form (LlamaTokenizer with legacy=False):
                normalizer null, pre_tokenizer Metaspace(prepend_scheme "first", split false),
                merges as pairs
                Both add a normalized non-special token ("<custom>", matched and decoded in its
                normalized form) and a special one ("<pad>"); their alphabet is the 70 most
                frequent characters, so that accents, CJK, emoji and control characters fall
                back to bytes. Their expected.json also holds "variants": the same file with
                fields changed (byte_fallback off, so that <unk> is fused or not; a byte token
                missing; other prepend schemes; Metaspace's split; Metaspace's decoder) and HF's
                results with each
                llama2_style/ also holds a tokenizer_config.json (TinyLlama's fields: LlamaTokenizer,
                legacy false, add_bos_token, added_tokens_decoder) and expected_pretrained.json:
                transformers 5's AutoTokenizer on the directory with that config and with other
                ones (legacy true; add_prefix_space false with fewer added tokens in the config;
                no added_tokens_decoder), its ids and decodes
  qwen2_style/  Qwen2's, Qwen2.5's and Qwen3's form: normalizer NFC, Split(Qwen2's regex,
                Isolated) + ByteLevel(use_regex=false), BPE without byte fallback (empty subword
                affixes), ByteLevel post-processor and decoder, <|endoftext|> <|im_start|>
                <|im_end|> special; texts that NFC changes (combining accents, Hangul jamo,
                U+212B, marks out of canonical order) besides the common ones; a variant with
                NFD in its place
  gemma_style/  Gemma's form as transformers' GemmaTokenizer writes it (Gemma 2's and 3's files):
                normalizer Replace(" ", "▁") without Prepend, pre_tokenizer Split(" ",
                MergedWithPrevious), BPE with byte_fallback and fuse_unk, decoder
                Sequence[Replace("▁", " "), ByteFallback, Fuse] (no Strip), "<bos> $A";
                llama2_style's vocabulary laid out as Gemma's (<pad> <eos> <bos> <unk> <mask>
                first), <start_of_turn> and <end_of_turn> special; a tokenizer_config.json
                naming GemmaTokenizer (AutoTokenizer on the directory gives the file's ids: the
                script checks it)
  corpus.txt    a test text for tokenize's end-to-end test

Each expected.json holds HF's results on the fixed CASES and on 40 random texts (seed 26) drawn
from POOL, every text encoded three ways and decoded two ways, plus its pre-tokens.

Run with /opt/torch2/bin/python (tokenizers 0.23, transformers 5.24):
python make_tokenizer_fixtures.py [OUT_DIR]
python make_tokenizer_fixtures.py --gemma-only [OUT_DIR]   writes gemma_style/ alone
python make_tokenizer_fixtures.py --compare-normalizers   (needs libutf8proc2) prints where
    tokenizers' NFC/NFD/NFKC/NFKD and utf8proc's differ on single code points and on Dives
    Akuru's pair: models/tokenizer/unicode_normalization.h
"""
import json
import os
import random
import shutil
import sys
import tempfile

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

GPT2_REGEX = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2's tokenizer.json (Qwen2.5 and Qwen3 have the same): Llama 3's with single digits.
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
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


def random_cases(n, seed=26, pool=POOL):
    rng = random.Random(seed)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(n)]


TEXTS = CASES + random_cases(40)

# SentencePiece-style edge texts: the meta space written in the text, special tokens next to
# spaces and at the start (Prepend and Metaspace's "first" differ there), control characters,
# a byte token's name as text, the added tokens.
SPM_CASES = [
    "▁leading meta space",
    "▁▁x ▁ y▁",
    "<s>Hello</s> world",
    "Hello<s>world",
    " <s> a </s> ",
    "<unk><unk>",
    "control \x00\x01\x1b\x7f\x08 chars",
    "<0x41> is not A",
    "tab\tand\u3000ideographic space",
    "emoji 😀 and 日本 and 🦀🦀",
    "<custom> and x<custom>y and <custom>",
    "a<pad>b <pad> <pad><pad>",
    "  two leading",
    "trailing  ",
    "\n\nnewlines\n",
    "\u00e9t\u00e9 \u00fcber na\u00efve",
    "x \t<pad>\n y\t<custom>\u3000 z <pad>  <pad>",
]
SPM_POOL = POOL + ["<s>", "</s>", "<unk>", "▁", "<custom>", "<pad>", "<0x41>", "\x00", "\x1b"]
SPM_TEXTS = TEXTS + SPM_CASES + random_cases(40, seed=27, pool=SPM_POOL)

# Texts that the Unicode normalization forms change: combining accents (composed by NFC), Hangul
# jamo (composed into syllables), singletons (U+212B ANGSTROM SIGN -> U+00C5, U+2126 OHM -> Omega),
# marks out of canonical order, composition exclusions (U+0958), compatibility characters that
# only NFKC/NFKD change (ligatures, fractions, circled and full-width digits), added tokens
# between, and the composed forms written directly.
NFC_CASES = [
    "e\u0301",
    "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af \u1100\u1161",
    "\u212b \u2126 \u212a A\u030a \u00c5",
    "a\u0323\u0301 a\u0301\u0323 q\u0307\u0323 \u1e9b\u0323",
    "\u0958 \u0915\u093c \u0344 \u0340\u0341",
    "\ufb01 \u00bd \u2460 \uff11\uff12 \u00b2 \u2075 \u3300 \u01c4",
    "<|im_start|>user\ne\u0301<|im_end|>\n<|im_start|>assistant\n\u1100\u1161<|im_end|>",
    "e<|endoftext|>\u0301 and \u0301 alone and e\u0301\u0301\u0301",
    "caf\u00e9 na\u00efve \uac01 \ud55c\uae00",
]
QWEN2_TEXTS = TEXTS + NFC_CASES + random_cases(
    40, seed=28, pool=POOL + ["\u0301", "\u0323", "\u030a", "\u1100", "\u1161", "\u11a8",
                              "\u212b", "\ufb01", "<|im_start|>", "<|im_end|>"])
# NFD in NFC's place (NFKC and NFKD are not offered: models/tokenizer/unicode_normalization.h).
QWEN2_VARIANTS = [{"name": "NFD", "set": {"/normalizer": {"type": "NFD"}}}]

# Fields changed in the SentencePiece-style files, and HF's results with each (JSON pointers).
SPM_VARIANTS = {
    "llama2": [
        {"name": "unk_fused", "set": {"/model/byte_fallback": False}},
        {"name": "unk_not_fused", "set": {"/model/byte_fallback": False, "/model/fuse_unk": False}},
        # 4-byte characters fall to <unk>; tokenizers leaves a pending <unk> behind the bytes of
        # the characters that follow it until a vocabulary character comes.
        # (renamed, not removed: tokenizers would renumber the added tokens after a hole)
        {"name": "byte_missing", "remove": ["/model/vocab/<0xF0>"],
         "set": {"/model/vocab/<F0>": 3 + 0xF0}},
        # lstrip and rstrip on "<custom>" (normalized: "▁" is no whitespace) and "<pad>"
        {"name": "strips", "set": {"/added_tokens/3/lstrip": True, "/added_tokens/3/rstrip": True,
                                   "/added_tokens/4/lstrip": True, "/added_tokens/4/rstrip": True}},
    ],
    "metaspace": [
        {"name": "prepend_always", "set": {"/pre_tokenizer/prepend_scheme": "always"}},
        {"name": "prepend_never", "set": {"/pre_tokenizer/prepend_scheme": "never"}},
        {"name": "split", "set": {"/pre_tokenizer/split": True}},
        {"name": "strips", "set": {"/added_tokens/3/lstrip": True, "/added_tokens/3/rstrip": True,
                                   "/added_tokens/4/lstrip": True, "/added_tokens/4/rstrip": True}},
        {"name": "metaspace_decoder", "set": {"/decoder": {
            "type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}}},
    ],
}


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


def train_qwen2():
    """Qwen2's form, trained on the NFC-normalized corpus."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=256 + len(QWEN2_SPECIALS) + 700,
                                  special_tokens=QWEN2_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(TRAIN * 3 + NFC_CASES + extra_training_text(), trainer)
    j = json.loads(tok.to_str())
    # As Qwen2's file has them.
    j["model"]["continuing_subword_prefix"] = ""
    j["model"]["end_of_word_suffix"] = ""
    qwen_byte_level = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    j["pre_tokenizer"]["pretokenizers"][1].update(qwen_byte_level)
    j["post_processor"].update(qwen_byte_level)
    j["decoder"].update(qwen_byte_level)
    return json.loads(Tokenizer.from_str(json.dumps(j)).to_str())


def train_spm(kind):
    """A SentencePiece-style BPE: trained on words as SentencePiece sees them ("▁" for spaces and
    before the text), then laid out as Llama's vocabulary: <unk> <s> </s>, the 256 byte tokens,
    the rest."""
    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    lines = TRAIN * 3 + extra_training_text()
    # The 70 most frequent characters (ties by code point: the trainer's own limit_alphabet
    # breaks ties by hash order, differently from run to run).
    counts = {}
    for c in "".join("▁" + line.replace(" ", "▁") for line in lines):
        counts[c] = counts.get(c, 0) + 1
    alphabet = sorted(counts, key=lambda c: (-counts[c], c))[:70]
    trainer = trainers.BpeTrainer(vocab_size=700, limit_alphabet=70, initial_alphabet=alphabet,
                                  show_progress=False)
    t.train_from_iterator(lines, trainer)
    trained = json.loads(t.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for token, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if token not in vocab:
            vocab[token] = len(vocab)
    merges = [tuple(m) for m in trained["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    if kind == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                               normalizers.Replace(" ", "▁")])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                     split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", 1)])
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True)
                            for s in ["<unk>", "<s>", "</s>"]])
    tok.add_tokens([AddedToken("<custom>", normalized=True, special=False)])
    tok.add_special_tokens([AddedToken("<pad>", normalized=False, special=True)])
    j = json.loads(tok.to_str())
    if kind == "llama2":
        del j["model"]["ignore_merges"]  # Llama 2's file predates the field
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    return j


def train_gemma():
    """gemma_style's tokenizer.json (see the module's docstring)."""
    spm = train_spm("llama2")
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<mask>": 4}
    for token, _ in sorted(spm["model"]["vocab"].items(), key=lambda kv: kv[1]):
        if token not in vocab and token not in ("<s>", "</s>"):
            vocab[token] = len(vocab)
    merges = [tuple(m.split(" ")) for m in spm["model"]["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos>:0 $A:0", pair="<bos>:0 $A:0 <bos>:1 $B:1", special_tokens=[("<bos>", 2)])
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in
                            ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>",
                             "<end_of_turn>"]])
    return json.loads(tok.to_str())


GEMMA_CASES = ["<start_of_turn>user\nHi there<end_of_turn>\n", "a  b   c ", " lead", "end "]


def write_gemma(out):
    """gemma_style/: the file, HF's results, and a tokenizer_config.json naming GemmaTokenizer,
    under which transformers' AutoTokenizer gives the file's ids (checked here)."""
    from transformers import AutoTokenizer
    j = train_gemma()
    texts = SPM_TEXTS + GEMMA_CASES
    e = expectations(j, texts, lossy_texts=["a😀b", "x\x00\x1by"])
    write_style(out, "gemma", j, e)
    d = os.path.join(out, "gemma_style")
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<bos>",
              "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
              "mask_token": "<mask>", "tokenizer_class": "GemmaTokenizer"}
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(config, indent=2) + "\n")
    auto = AutoTokenizer.from_pretrained(d)
    differ = [c["text"] for c in e["cases"] if auto(c["text"])["input_ids"] != c["ids"]]
    print(f"gemma_style as {type(auto).__name__}: {len(differ)} of {len(texts)} texts differ "
          f"from the file")
    if differ:
        sys.exit(f"AutoTokenizer differs from the file on {differ[:3]}")


def edited(j, variant):
    """j with a variant's fields set and removed (JSON pointers of plain keys and indices)."""
    j = json.loads(json.dumps(j))
    def parent(pointer):
        keys = pointer.split("/")[1:]
        node = j
        for k in keys[:-1]:
            node = node[int(k) if isinstance(node, list) else k]
        return node, int(keys[-1]) if isinstance(node, list) else keys[-1]
    for pointer, value in variant.get("set", {}).items():
        node, key = parent(pointer)
        node[key] = value
    for pointer in variant.get("remove", []):
        node, key = parent(pointer)
        del node[key]
    return j


def variant_results(j, variant, texts):
    tok = Tokenizer.from_str(json.dumps(edited(j, variant)))
    results = {}
    for text in texts:
        ids = tok.encode(text, add_special_tokens=True).ids
        results[text] = {"ids": ids, "decode": tok.decode(ids, skip_special_tokens=False),
                         "decode_skip_special": tok.decode(ids, skip_special_tokens=True)}
    return dict(variant, results=results)


def expectations(j, texts=TEXTS, variants=(), lossy_texts=(), variant_texts=CASES + SPM_CASES):
    tok = Tokenizer.from_str(json.dumps(j))
    cases = []
    for text in texts:
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
    for text in ["龍虎", "🦀𝄞", "Ѯѱ", "👍🏽", "日本語", *lossy_texts]:
        ids = tok.encode(text, add_special_tokens=False).ids
        for cut in [ids[:1], ids[1:], ids[:-1], ids[-1:], ids[::-1]]:
            lossy.append({"ids": cut, "decode": tok.decode(cut, skip_special_tokens=False)})
    pre = tok.pre_tokenizer
    pre_tokens = {t: [p for p, _ in pre.pre_tokenize_str(t)] for t in texts} if pre else None
    # The same file with ignore_merges flipped (Llama 3 style only).
    flipped = None
    if j["model"].get("ignore_merges"):
        jf = json.loads(json.dumps(j))
        jf["model"]["ignore_merges"] = False
        tf = Tokenizer.from_str(json.dumps(jf))
        flipped = {t: tf.encode(t, add_special_tokens=False).ids for t in texts}
    e = {"generator": "tools/torch_reference/make_tokenizer_fixtures.py",
         "tokenizers_version": tokenizers.__version__,
         "vocab_size": tok.get_vocab_size(with_added_tokens=True),
         "cases": cases, "lossy": lossy, "pre_tokens": pre_tokens,
         "ids_without_ignore_merges": flipped}
    if variants:
        e["variants"] = [variant_results(j, v, variant_texts) for v in variants]
    return e


def added_tokens_decoder(j, keep=None):
    """tokenizer.json's added tokens as tokenizer_config.json's added_tokens_decoder."""
    return {str(t["id"]): {k: t[k] for k in ["content", "lstrip", "normalized", "rstrip",
                                              "single_word", "special"]}
            for t in j["added_tokens"] if keep is None or t["content"] in keep}


def pretrained_configs(j):
    """tokenizer_config.json's written beside llama2_style's file: the first as TinyLlama's (the
    directory's own), the others as tests write them into a directory with the same file."""
    tinyllama = {"add_bos_token": True, "add_eos_token": False,
                 "added_tokens_decoder": added_tokens_decoder(j), "bos_token": "<s>",
                 "clean_up_tokenization_spaces": False, "eos_token": "</s>", "legacy": False,
                 "model_max_length": 2048, "pad_token": None, "padding_side": "right",
                 "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer",
                 "unk_token": "<unk>", "use_default_system_prompt": False}
    return [
        {"name": "tinyllama", "config": tinyllama},
        {"name": "legacy", "config": {"tokenizer_class": "LlamaTokenizerFast", "legacy": True}},
        {"name": "no_prefix_space", "config": {
            "tokenizer_class": "LlamaTokenizer", "add_prefix_space": False,
            "added_tokens_decoder": added_tokens_decoder(j, ["<unk>", "<s>", "</s>"])}},
        {"name": "defaults", "config": {"tokenizer_class": "LlamaTokenizer"}},
    ]


def pretrained_expectations(j, texts):
    """transformers 5's AutoTokenizer on a directory of j and each config: tokenizer(text)'s ids
    and their decodes."""
    from transformers import AutoTokenizer, __version__ as transformers_version
    results = []
    for c in pretrained_configs(j):
        d = tempfile.mkdtemp()
        try:
            for name, value in [("tokenizer.json", j), ("tokenizer_config.json", c["config"])]:
                with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                    json.dump(value, f, ensure_ascii=False)
            tok = AutoTokenizer.from_pretrained(d)
            cases = []
            for text in texts:
                ids = tok(text)["input_ids"]
                cases.append({"text": text, "ids": ids,
                              "decode": tok.decode(ids, skip_special_tokens=False),
                              "decode_skip_special": tok.decode(ids, skip_special_tokens=True)})
            results.append(dict(c, tokenizer_class=type(tok).__name__, vocab_size=len(tok),
                                cases=cases))
        finally:
            shutil.rmtree(d)
    return {"generator": "tools/torch_reference/make_tokenizer_fixtures.py",
            "transformers_version": transformers_version, "configs": results}


def check_other_classes(out):
    """Prints where AutoTokenizer, for a tokenizer_config.json naming another class, differs from
    the file (models/tokenizer follows the file there): 0 expected for each."""
    from transformers import AutoTokenizer
    for style, cls in [("gpt2", "GPT2Tokenizer"), ("llama3", "PreTrainedTokenizerFast"),
                       ("qwen2", "Qwen2Tokenizer"), ("metaspace", "LlamaTokenizer")]:
        d = tempfile.mkdtemp()
        try:
            shutil.copy(os.path.join(out, f"{style}_style", "tokenizer.json"), d)
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump({"tokenizer_class": cls}, f)
            tok = AutoTokenizer.from_pretrained(d)
            with open(os.path.join(out, f"{style}_style", "expected.json"), encoding="utf-8") as f:
                cases = json.load(f)["cases"]
            differ = sum(tok(c["text"])["input_ids"] != c["ids"] or
                         tok.decode(c["ids"]) != c["decode"] for c in cases)
            print(f"{style}_style as {cls}: {differ} of {len(cases)} texts differ from the file")
        finally:
            shutil.rmtree(d)


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")


def write_style(out, kind, j, e):
    d = os.path.join(out, f"{kind}_style")
    os.makedirs(d, exist_ok=True)
    for name, value in [("tokenizer.json", j), ("expected.json", e)]:
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")


def compare_normalizers():
    import ctypes
    lib = ctypes.CDLL("libutf8proc.so.2")
    lib.utf8proc_unicode_version.restype = ctypes.c_char_p
    print(f"utf8proc Unicode {lib.utf8proc_unicode_version().decode()}, "
          f"tokenizers {tokenizers.__version__}")
    texts = [chr(cp) for cp in range(0x80, 0x110000) if not 0xD800 <= cp < 0xE000]
    texts.append("\U00011935\U00011930")
    for form in ["NFC", "NFD", "NFKC", "NFKD"]:
        fn = getattr(lib, "utf8proc_" + form)
        fn.restype = ctypes.c_void_p  # freed by nobody: a one-off comparison
        hf = getattr(normalizers, form)()
        differ = [t for t in texts
                  if hf.normalize_str(t) != ctypes.string_at(fn(t.encode())).decode()]
        print(f"{form}: {len(differ)} differ: "
              f"{' '.join(' '.join(f'U+{ord(c):04X}' for c in t) for t in differ[:8])}")


def main():
    if sys.argv[1:] == ["--compare-normalizers"]:
        return compare_normalizers()
    here = os.path.dirname(os.path.abspath(__file__))
    args = [a for a in sys.argv[1:] if a != "--gemma-only"]
    out = args[0] if args else os.path.join(here, "..", "..", "tests", "fixtures", "tokenizers")
    if "--gemma-only" in sys.argv[1:]:
        return write_gemma(out)
    for kind in ["gpt2", "llama3"]:
        j = train(kind)
        e = expectations(j)
        write_style(out, kind, j, e)
        if e["ids_without_ignore_merges"]:
            differ = [t for t, c in zip(TEXTS, e["cases"])
                      if c["ids_no_special"] != e["ids_without_ignore_merges"][t]]
            print(f"{kind}: ignore_merges changes {len(differ)} case(s): {differ[:3]}")
    j = train_qwen2()
    e = expectations(j, QWEN2_TEXTS, QWEN2_VARIANTS, variant_texts=NFC_CASES + CASES)
    write_style(out, "qwen2", j, e)
    nfc = tokenizers.normalizers.NFC()
    changed = [t for t in QWEN2_TEXTS if nfc.normalize_str(t) != t]
    print(f"qwen2: NFC changes {len(changed)} of {len(QWEN2_TEXTS)} texts")
    corpus = "\n".join(CASES[1:15]) + "\n"
    with open(os.path.join(out, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(corpus)
    for kind in ["llama2", "metaspace"]:
        j = train_spm(kind)
        e = expectations(j, SPM_TEXTS, SPM_VARIANTS[kind], ["a😀b", "x\x00\x1by"])
        tok = Tokenizer.from_str(json.dumps(j))
        e["corpus_ids"] = tok.encode(corpus).ids  # tokenize's end-to-end test
        e["corpus_decode_skip_special"] = tok.decode(e["corpus_ids"], skip_special_tokens=True)
        write_style(out, kind, j, e)
        if kind == "llama2":
            p = pretrained_expectations(j, SPM_TEXTS)
            d = os.path.join(out, "llama2_style")
            with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                f.write(json.dumps(p["configs"][0]["config"], indent=2) + "\n")
            write_json(os.path.join(d, "expected_pretrained.json"), p)
            for c in p["configs"]:
                differ = sum(a["ids"] != b["ids"] for a, b in zip(c["cases"], e["cases"]))
                print(f"llama2 as {c['tokenizer_class']} ({c['name']}): {differ} of "
                      f"{len(c['cases'])} texts' ids differ from the file's")
        unk = sum(c["ids_no_special"].count(0) for c in e["cases"])
        fallback = sum(sum(3 <= i < 259 for i in c["ids_no_special"]) for c in e["cases"])
        print(f"{kind}: {unk} <unk> and {fallback} byte tokens in the cases")
    write_gemma(out)
    check_other_classes(out)


if __name__ == "__main__":
    main()
