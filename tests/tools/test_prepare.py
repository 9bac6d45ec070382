#!/usr/bin/env python3
"""examples/qwen2/prepare.py and byte_tokenizer.py, end to end.

Builds the byte tokenizer into a temporary folder, runs prepare.py on .txt and .jsonl
inputs (text and prompt/response records) and reads the token files back: the header
(magic, version, count), the tokens (decoding to the documents, each + EOS), the masks
(1 exactly on text, responses and their EOS), the validation split (whole documents,
the same for the same seed), uint32 files for a vocabulary past 65536, where the EOS comes
from, and the errors (one line naming file:line, exit 1, no traceback), --help (exit 0)
and a bad option (exit 2).

Run by ctest (tests/CMakeLists.txt, tools.prepare): test_prepare.py [--scripts DIR]
Needs the `tokenizers` package (scripts/deps installs it).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "qwen2"))
if "--scripts" in sys.argv:
    i = sys.argv.index("--scripts")
    SCRIPTS = sys.argv[i + 1]
    del sys.argv[i:i + 2]

try:
    from tokenizers import Tokenizer, models, pre_tokenizers
except ImportError as e:  # a clear failure, not a skip: CI must run this
    print(f"test_prepare: {e}; install with scripts/deps (pip install tokenizers)")
    sys.exit(1)

EOS = 256
EOS_TEXT = "<|endoftext|>"


def run(script, *args):
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *args],
                          capture_output=True, text=True, timeout=120)


def read_token_file(path):
    """(magic, version, count, tokens), checking the layout token_file.hpp reads."""
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) >= 1024, f"{path}: {len(data)} bytes"
    header = struct.unpack("<256i", data[:1024])
    magic, version, count = header[:3]
    assert all(h == 0 for h in header[3:]), f"{path}: header past [2] not zero"
    width = {(20240520, 1): 2, (20240801, 7): 4}[(magic, version)]
    assert len(data) == 1024 + width * count, f"{path}: {len(data)} bytes for {count} tokens of {width}"
    tokens = list(struct.unpack(f"<{count}{'H' if width == 2 else 'I'}", data[1024:]))
    return magic, version, count, tokens


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def doc_tokens(text, eos=True):
    return list(text.encode("utf-8")) + ([EOS] if eos else [])


def split_into_docs(tokens):
    """Token runs ending in EOS (the documents of a byte-tokenized file)."""
    docs, cur = [], []
    for t in tokens:
        cur.append(t)
        if t == EOS:
            docs.append(cur)
            cur = []
    assert not cur, "tokens after the last EOS"
    return docs


class Prepare(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="strata_prepare_")
        cls.dir = cls.tmp.name
        cls.tok_dir = os.path.join(cls.dir, "bytes")
        r = run("byte_tokenizer.py", "--out", cls.tok_dir)
        assert r.returncode == 0, r.stdout + r.stderr
        for f in ("tokenizer.json", "tokenizer_config.json"):
            assert os.path.isfile(os.path.join(cls.tok_dir, f)), f
        cls.tok = Tokenizer.from_file(os.path.join(cls.tok_dir, "tokenizer.json"))

        # Documents: two .txt files (one with non-ASCII text and CRLF lines), a .jsonl of
        # text and prompt/response records with a blank line among them.
        cls.txt1 = "The quick brown fox jumps over the lazy dog.\nA second line.\n"
        cls.txt2 = "Grüße aus Köln — 東京 🙂\r\nspaces  and\ttabs , . ! \r\n"
        cls.records = [
            {"text": "A plain record: every token is trained."},
            {"prompt": "Q: What is two plus two?\nA:", "response": " Four."},
            {"text": "Another text record, with ünïcödé."},
            {"prompt": "", "response": "A response with an empty prompt."},
            {"prompt": "Translate 'cat' to French: ", "response": "chat", "id": 7},
        ]
        cls.a = cls.write("a.txt", cls.txt1)
        cls.b = cls.write("b.txt", cls.txt2)
        lines = [json.dumps(r, ensure_ascii=i % 2 == 0) for i, r in enumerate(cls.records)]
        lines.insert(2, "   ")
        cls.c = cls.write("c.jsonl", "\n".join(lines) + "\n")
        # (prompt, trained text) of every document, in input order.
        cls.docs = [("", cls.txt1), ("", cls.txt2)] + [(r.get("prompt", ""), r.get("text", r.get("response")))
                                                       for r in cls.records]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def write(cls, name, text):
        path = os.path.join(cls.dir, name)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        return path

    def prepare(self, *args, model=None, ok=True):
        r = run("prepare.py", "--model", model or self.tok_dir, *args)
        if ok:
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def out(self, name):
        return os.path.join(self.dir, name)

    # ---- the tokenizer ---------------------------------------------------------------
    def test_byte_tokenizer_round_trips(self):
        self.assertEqual(self.tok.get_vocab_size(with_added_tokens=True), 257)
        self.assertEqual(self.tok.token_to_id(EOS_TEXT), EOS)
        for text in (self.txt1, self.txt2, "", " ", "\x00\x7f", "🙂" * 3, "  leading and trailing  "):
            ids = self.tok.encode(text, add_special_tokens=False).ids
            self.assertEqual(ids, list(text.encode("utf-8")), repr(text))
            self.assertEqual(self.tok.decode(ids), text)
        with open(os.path.join(self.tok_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["eos_token"], EOS_TEXT)

    # ---- token files -----------------------------------------------------------------
    def test_tokens_and_masks(self):
        prefix = self.out("all")
        r = self.prepare("--out", prefix, "--val-fraction", "0", self.a, self.b, self.c)
        self.assertIn("7 documents", r.stdout)
        self.assertEqual(len(r.stdout.strip().splitlines()), 1, r.stdout)
        magic, version, count, tokens = read_token_file(prefix + ".train.bin")
        self.assertEqual((magic, version), (20240520, 1))
        want_tokens, want_mask = [], []
        for p, t in self.docs:
            want_tokens += list(p.encode("utf-8")) + doc_tokens(t)
            want_mask += [0] * len(p.encode("utf-8")) + [1] * (len(t.encode("utf-8")) + 1)
        self.assertEqual(count, len(want_tokens))
        self.assertEqual(tokens, want_tokens)
        text = self.tok.decode(tokens, skip_special_tokens=False)
        self.assertEqual(text, "".join(p + t + EOS_TEXT for p, t in self.docs))

        magic, version, mcount, mask = read_token_file(prefix + ".train.mask.bin")
        self.assertEqual((magic, version, mcount), (20240520, 1, count))
        self.assertEqual(mask, want_mask)
        # The trained tokens are the texts and responses, each with its EOS; the rest prompts.
        trained = bytes(t for t, m in zip(tokens, mask) if m and t != EOS).decode("utf-8")
        self.assertEqual(trained, "".join(t for _, t in self.docs))
        untrained = bytes(t for t, m in zip(tokens, mask) if not m).decode("utf-8")
        self.assertEqual(untrained, "".join(p for p, _ in self.docs))
        self.assertTrue(all(m == 1 for t, m in zip(tokens, mask) if t == EOS))

        _, _, vcount, vtokens = read_token_file(prefix + ".val.bin")
        self.assertEqual((vcount, vtokens), (0, []))
        _, _, vmcount, _ = read_token_file(prefix + ".val.mask.bin")
        self.assertEqual(vmcount, 0)
        self.assertIn("masked", r.stdout)

    def test_text_only_has_no_masks(self):
        prefix = self.out("text")
        # A stale mask from an earlier run of the same prefix is removed.
        with open(prefix + ".train.mask.bin", "wb") as f:
            f.write(b"old")
        self.prepare("--out", prefix, "--val-fraction", "0", self.a, self.b)
        _, _, _, tokens = read_token_file(prefix + ".train.bin")
        self.assertEqual(tokens, doc_tokens(self.txt1) + doc_tokens(self.txt2))
        for s in ("train", "val"):
            self.assertFalse(os.path.exists(f"{prefix}.{s}.mask.bin"), s)

    def test_no_eos(self):
        prefix = self.out("noeos")
        self.prepare("--out", prefix, "--val-fraction", "0", "--no-eos", self.a, self.b)
        _, _, _, tokens = read_token_file(prefix + ".train.bin")
        self.assertEqual(tokens, doc_tokens(self.txt1, False) + doc_tokens(self.txt2, False))

    # ---- the validation split ----------------------------------------------------------
    def test_split_by_documents_deterministic(self):
        texts = [f"Document number {i}: " + "words " * (i % 5 + 1) + "end." for i in range(20)]
        jsonl = self.write("many.jsonl", "".join(
            json.dumps({"text": t} if i % 3 else {"prompt": f"P{i}? ", "response": t}) + "\n"
            for i, t in enumerate(texts)))

        def splits(seed, name):
            prefix = self.out(name)
            r = self.prepare("--out", prefix, "--val-fraction", "0.25", "--seed", str(seed), jsonl)
            self.assertIn("20 documents (15 train, 5 val)", r.stdout)
            files = {s: read_bytes(f"{prefix}.{s}.bin") + read_bytes(f"{prefix}.{s}.mask.bin")
                     for s in ("train", "val")}
            docs = {}
            for s in ("train", "val"):
                _, _, _, tokens = read_token_file(f"{prefix}.{s}.bin")
                _, _, _, mask = read_token_file(f"{prefix}.{s}.mask.bin")
                self.assertEqual(len(mask), len(tokens))
                ids, pos = [], 0
                for d in split_into_docs(tokens):
                    i = next(i for i, t in enumerate(texts) if d[-len(t.encode()) - 1:-1] == list(t.encode()))
                    p = b"" if i % 3 else f"P{i}? ".encode()
                    self.assertEqual(d, list(p) + doc_tokens(texts[i]), f"{s}: document {i} whole")
                    self.assertEqual(mask[pos:pos + len(d)], [0] * len(p) + [1] * (len(d) - len(p)))
                    pos += len(d)
                    ids.append(i)
                self.assertEqual(ids, sorted(ids), f"{s}: documents in input order")
                docs[s] = ids
            self.assertEqual(sorted(docs["train"] + docs["val"]), list(range(20)))
            self.assertEqual(len(docs["val"]), 5)
            return docs["val"], files

        val1, files1 = splits(1, "s1")
        val1b, files1b = splits(1, "s1b")
        self.assertEqual(val1, val1b)
        self.assertEqual(files1, files1b, "same seed, same bytes")
        others = [splits(seed, f"s{seed}")[0] for seed in (2, 3)]
        self.assertTrue(any(v != val1 for v in others), "the seed chooses the split")

    # ---- vocabulary past 65536: uint32 --------------------------------------------------
    def test_uint32_vocab(self):
        d = os.path.join(self.dir, "big")
        os.makedirs(d, exist_ok=True)
        vocab = {f"w{i}": i for i in range(70000)}
        vocab["[UNK]"] = 70000
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"eos_token_id": 69999, "vocab_size": 70001}, f)
        src = self.write("big.txt", "w1 w65536 w69998")
        prefix = self.out("big")
        r = self.prepare("--out", prefix, "--val-fraction", "0", src, model=d)
        self.assertIn("uint32", r.stdout)
        magic, version, count, tokens = read_token_file(prefix + ".train.bin")
        self.assertEqual((magic, version, count), (20240801, 7, 4))
        self.assertEqual(tokens, [1, 65536, 69998, 69999])

    def test_eos_sources(self):
        d = os.path.join(self.dir, "eos")
        os.makedirs(d, exist_ok=True)
        self.tok.save(os.path.join(d, "tokenizer.json"))
        prefix = self.out("eos")
        # generation_config.json's eos_token_id (a list: the first) over config.json's.
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump({"eos_token_id": [10, 11]}, f)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"eos_token_id": 12}, f)
        self.prepare("--out", prefix, "--val-fraction", "0", self.a, model=d)
        self.assertEqual(read_token_file(prefix + ".train.bin")[3], doc_tokens(self.txt1, False) + [10])
        os.remove(os.path.join(d, "generation_config.json"))
        self.prepare("--out", prefix, "--val-fraction", "0", self.a, model=d)
        self.assertEqual(read_token_file(prefix + ".train.bin")[3], doc_tokens(self.txt1, False) + [12])
        # tokenizer_config.json's eos_token (as a dict) first.
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"eos_token": {"content": EOS_TEXT}}, f)
        self.prepare("--out", prefix, "--val-fraction", "0", self.a, model=d)
        self.assertEqual(read_token_file(prefix + ".train.bin")[3], doc_tokens(self.txt1))
        # None anywhere: a warning, and no EOS.
        for f in ("config.json", "tokenizer_config.json"):
            os.remove(os.path.join(d, f))
        r = self.prepare("--out", prefix, "--val-fraction", "0", self.a, model=d)
        self.assertIn("warning", r.stderr)
        self.assertEqual(read_token_file(prefix + ".train.bin")[3], doc_tokens(self.txt1, False))

    # ---- errors and the command line ----------------------------------------------------
    def assert_error(self, r, *needles):
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        for n in needles:
            self.assertIn(n, lines[0])

    def test_errors(self):
        prefix = self.out("err")
        empty = os.path.join(self.dir, "no_model")
        os.makedirs(empty, exist_ok=True)
        self.assert_error(self.prepare("--out", prefix, self.a, model=empty, ok=False),
                          os.path.join(empty, "tokenizer.json"))
        bad = self.write("bad.jsonl", '{"text": "fine"}\n\n{"prompt": "no response"}\n')
        self.assert_error(self.prepare("--out", prefix, bad, ok=False), f"{bad}:3", "response")
        notjson = self.write("notjson.jsonl", '{"text": "fine"}\n{"text": "unterminated\n')
        self.assert_error(self.prepare("--out", prefix, notjson, ok=False), f"{notjson}:2")
        notstr = self.write("notstr.jsonl", '{"text": 5}\n')
        self.assert_error(self.prepare("--out", prefix, notstr, ok=False), f"{notstr}:1")
        for name, text in (("empty.txt", ""), ("blank.txt", " \n\n"), ("empty.jsonl", "\n  \n")):
            path = self.write(name, text)
            self.assert_error(self.prepare("--out", prefix, self.a, path, ok=False), f"{path}:1", "empty")
        latin1 = os.path.join(self.dir, "latin1.txt")
        with open(latin1, "wb") as f:
            f.write(b"line one\ncaf\xe9\n")
        self.assert_error(self.prepare("--out", prefix, latin1, ok=False), f"{latin1}:2", "UTF-8")
        missing = os.path.join(self.dir, "missing.txt")
        self.assert_error(self.prepare("--out", prefix, missing, ok=False), missing)
        other = self.write("other.csv", "a,b\n")
        self.assert_error(self.prepare("--out", prefix, other, ok=False), other)
        self.assertFalse(os.path.exists(prefix + ".train.bin"), "no output after an error")

    def test_command_line(self):
        r = run("prepare.py", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage:", r.stdout)
        self.assertIn("--val-fraction", r.stdout)
        r = run("prepare.py", "--model", self.tok_dir, "--out", self.out("x"), "--bogus", self.a)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage:", r.stderr)
        self.assertIn("--bogus", r.stderr)
        r = run("prepare.py", "--model", self.tok_dir, "--out", self.out("x"), "--val-fraction", "1.5", self.a)
        self.assertEqual(r.returncode, 2)
        r = run("byte_tokenizer.py", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage:", r.stdout)
        self.assertEqual(run("byte_tokenizer.py").returncode, 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
