#!/usr/bin/env python3
"""Tokenizes text into token files in llm.c's layout, the ones strata reads
(include/strata/data/token_file.hpp): a 256 x int32 little-endian header (magic, version,
token count; the rest zero), then the tokens, uint16 (magic 20240520, version 1) when the
vocabulary has at most 65536 tokens, else uint32 (magic 20240801, version 7).

    prepare.py --model DIR --out PREFIX [--val-fraction F] [--seed S] [--eos | --no-eos] INPUT...

Inputs:
  X.txt     one document: the whole file, as it is (UTF-8; a leading BOM is dropped)
  X.jsonl   one document a line (blank lines skipped):
              {"text": "..."}                      every token trained
              {"prompt": "...", "response": "..."}  only the response's tokens trained
            prompt and response are tokenized apart and joined as they are: a chat
            template, if the model wants one, is part of the strings.
Documents are concatenated in input order, each followed by the EOS token (unless
--no-eos): DIR/tokenizer_config.json's eos_token, else generation_config.json's or
config.json's eos_token_id, else none (a warning). The tokenizer is DIR/tokenizer.json
(the `tokenizers` package); no BOS or other special token is added.

Outputs: PREFIX.train.bin and PREFIX.val.bin. When any prompt/response record exists,
also PREFIX.train.mask.bin and PREFIX.val.mask.bin: the same layout and count, values 0/1,
mask[i] = 1 when token i is trained as a label (text and response tokens and the EOS that
ends them), 0 for prompt tokens. The validation split takes whole documents, chosen by
--seed: round(F x documents) of them, at least one when F > 0 and there are two or more,
never all. A one-line summary goes to stdout; errors are one line on stderr, exit 1.
"""
import argparse
import json
import os
import random
import struct
import sys
from array import array

PROG = "prepare.py"
MAGIC_U16, VERSION_U16 = 20240520, 1
MAGIC_U32, VERSION_U32 = 20240801, 7
HEADER_INTS = 256
MAX_TOKENS = 2**31 - 1  # the header's count is an int32


class PrepError(Exception):
    """One line for the user: where (file[:line]) and what."""


def warn(msg):
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


# ---- the model folder ----------------------------------------------------------------

def load_json(path):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PrepError(f"{path}: not valid JSON: {e}") from None
    except OSError as e:
        raise PrepError(f"{path}: cannot read: {e.strerror}") from None


def load_tokenizer(model_dir):
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.isfile(path):
        raise PrepError(f"{path}: not found (--model names a folder with a tokenizer.json)")
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise PrepError(f"{e}; install it with scripts/deps (pip install tokenizers)") from None
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises its own Exception types
        raise PrepError(f"{path}: not a tokenizer the `tokenizers` package reads: {str(e).splitlines()[0]}") from None


def first_id(v):
    if isinstance(v, list):
        v = v[0] if v else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def find_eos(model_dir, tok):
    """The EOS id and where it came from, or (None, reason)."""
    vocab = tok.get_vocab_size(with_added_tokens=True)
    path = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.isfile(path):
        eos = load_json(path).get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        if isinstance(eos, str):
            i = tok.token_to_id(eos)
            if i is None:
                raise PrepError(f"{path}: eos_token {eos!r} is not in the tokenizer's vocabulary")
            return i, f"{eos!r} from tokenizer_config.json"
    for name in ("generation_config.json", "config.json"):
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            cfg = load_json(path)
            i = first_id(cfg.get("eos_token_id"))
            if i is not None:
                if not 0 <= i < vocab:
                    raise PrepError(f"{path}: eos_token_id {i} is outside the tokenizer's {vocab} tokens")
                return i, f"{tok.id_to_token(i)!r} (eos_token_id) from {name}"
    return None, "no eos_token in tokenizer_config.json, no eos_token_id in generation_config.json or config.json"


# ---- the inputs ----------------------------------------------------------------------

def decode_utf8(data, path, line=None):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if line is None:
            line, what = data.count(b"\n", 0, e.start) + 1, ""
        else:
            what = " of the line"
        raise PrepError(f"{path}:{line}: not UTF-8 (byte {data[e.start]:#04x} at offset {e.start}{what})") from None


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise PrepError(f"{path}: cannot read: {e.strerror}") from None


def read_documents(path):
    """[(prompt or None, text)]: text is trained; a prompt before it is not."""
    data = read_bytes(path)
    kind = os.path.splitext(path)[1].lower()
    if kind == ".jsonl":
        docs = []
        for n, raw in enumerate(data.split(b"\n"), start=1):
            if not raw.strip():
                continue
            s = decode_utf8(raw, path, n)
            try:
                rec = json.loads(s)
            except json.JSONDecodeError as e:
                raise PrepError(f"{path}:{n}: not JSON: {e.msg} (column {e.colno})") from None
            if not isinstance(rec, dict):
                raise PrepError(f"{path}:{n}: a line is a JSON object, {{\"text\": ...}} or "
                                f"{{\"prompt\": ..., \"response\": ...}}, not {type(rec).__name__}")
            if "text" in rec:
                if "prompt" in rec or "response" in rec:
                    raise PrepError(f"{path}:{n}: \"text\" together with \"prompt\"/\"response\": "
                                    f"a line is one kind of record")
                if not isinstance(rec["text"], str) or not rec["text"]:
                    raise PrepError(f"{path}:{n}: \"text\" is not a non-empty string")
                docs.append((None, rec["text"]))
            elif "prompt" in rec and "response" in rec:
                if not isinstance(rec["prompt"], str):
                    raise PrepError(f"{path}:{n}: \"prompt\" is not a string")
                if not isinstance(rec["response"], str) or not rec["response"]:
                    raise PrepError(f"{path}:{n}: \"response\" is not a non-empty string")
                docs.append((rec["prompt"], rec["response"]))
            else:
                keys = ", ".join(f'"{k}"' for k in rec) or "no keys"
                raise PrepError(f"{path}:{n}: a line needs \"text\", or \"prompt\" and \"response\" "
                                f"(it has {keys})")
        if not docs:
            raise PrepError(f"{path}:1: empty input (no JSON lines)")
        return docs
    if kind == ".txt":
        text = decode_utf8(data, path)
        if text.startswith("\ufeff"):
            text = text[1:]
        if not text.strip():
            raise PrepError(f"{path}:1: empty input (no text)")
        return [(None, text)]
    raise PrepError(f"{path}: not .txt (one document) or .jsonl (one record a line)")


# ---- output --------------------------------------------------------------------------

def write_token_file(path, values, width):
    magic, version = (MAGIC_U16, VERSION_U16) if width == 2 else (MAGIC_U32, VERSION_U32)
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = magic, version, len(values)
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack(f"<{HEADER_INTS}i", *header))
            values.tofile(f)
        os.replace(tmp, path)
    except OSError as e:
        raise PrepError(f"{path}: cannot write: {e.strerror}") from None


def typecode_of(width):
    for code in ("H", "I", "L"):
        if array(code).itemsize == width:
            return code
    raise AssertionError(f"no {width}-byte array type")


def split(n, fraction, seed):
    """The indices of the validation documents."""
    if fraction <= 0 or n < 2:
        return set()
    k = min(n - 1, max(1, round(fraction * n)))
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return set(order[:k])


def val_fraction(s):
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"{s} is not in [0, 1)")
    return v


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Tokenize .txt / .jsonl inputs into PREFIX.train.bin and PREFIX.val.bin (llm.c token "
                    "files: uint16 when the vocabulary has <= 65536 tokens, else uint32), and "
                    "PREFIX.{train,val}.mask.bin when any prompt/response record exists.",
        epilog="A .txt file is one document. A .jsonl line is {\"text\": ...} (every token trained) or "
               "{\"prompt\": ..., \"response\": ...} (mask 1 on the response and its EOS only). Documents "
               "are concatenated in order, each followed by the EOS token.")
    ap.add_argument("--model", required=True, metavar="DIR",
                    help="folder with tokenizer.json (and tokenizer_config.json / config.json for the EOS)")
    ap.add_argument("--out", required=True, metavar="PREFIX", help="writes PREFIX.train.bin, PREFIX.val.bin, ...")
    ap.add_argument("--val-fraction", type=val_fraction, default=0.05, metavar="F",
                    help="fraction of the documents held out for validation (default 0.05)")
    ap.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the validation split (default 0)")
    ap.add_argument("--eos", action=argparse.BooleanOptionalAction, default=True,
                    help="end each document with the EOS token (default: on)")
    ap.add_argument("inputs", nargs="+", metavar="INPUT", help=".txt or .jsonl files")
    return ap.parse_args(argv)


def run(args):
    folder = os.path.dirname(args.out) or "."
    if not os.path.isdir(folder):
        raise PrepError(f"{args.out}: the folder {folder} does not exist (--out is a path prefix)")
    tok = load_tokenizer(args.model)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    width = 2 if vocab <= 65536 else 4

    eos = None
    if args.eos:
        eos, where = find_eos(args.model, tok)
        if eos is None:
            warn(f"{args.model}: {where}: documents are joined without an EOS token")

    docs = []  # (prompt or None, text)
    for path in args.inputs:
        docs.extend(read_documents(path))
    has_masks = any(p is not None for p, _ in docs)

    # Tokenize in one batch (the package uses every core); a prompt and its response apart.
    texts, slots = [], []
    for p, t in docs:
        slots.append(len(texts))
        if p is not None:
            texts.append(p)
        texts.append(t)
    encoded = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]

    val_docs = split(len(docs), args.val_fraction, args.seed)
    code = typecode_of(width)
    out = {s: (array(code), array(code)) for s in ("train", "val")}
    limit = 1 << (8 * width)
    for i, ((p, _), slot) in enumerate(zip(docs, slots)):
        tokens, mask = out["val" if i in val_docs else "train"]
        if p is not None:
            ids = encoded[slot]
            tokens.extend(ids)
            mask.extend([0] * len(ids))
            slot += 1
        ids = encoded[slot]
        if ids and max(ids) >= limit:  # a tokenizer whose ids pass its own vocabulary size
            raise PrepError(f"{args.model}/tokenizer.json: token id {max(ids)} does not fit "
                            f"{8 * width} bits (the vocabulary has {vocab} tokens)")
        tokens.extend(ids)
        mask.extend([1] * len(ids))
        if eos is not None:
            tokens.append(eos)
            mask.append(1)
    for s, (tokens, _) in out.items():
        if len(tokens) > MAX_TOKENS:
            raise PrepError(f"{args.out}.{s}.bin: {len(tokens)} tokens, more than a token file's int32 count holds")

    if not val_docs and args.val_fraction > 0:
        warn(f"only {len(docs)} document: the validation split is empty (it takes whole documents)")
    for s, (tokens, mask) in out.items():
        write_token_file(f"{args.out}.{s}.bin", tokens, width)
        mask_path = f"{args.out}.{s}.mask.bin"
        if has_masks:
            write_token_file(mask_path, mask, width)
        elif os.path.exists(mask_path):  # an earlier run's, which no longer matches
            os.remove(mask_path)
            warn(f"{mask_path}: removed (an earlier run's; these inputs have no prompt/response records)")

    n_train = len(out["train"][0])
    n_val = len(out["val"][0])
    total = n_train + n_val
    if has_masks:
        zeros = sum(m.count(0) for _, m in out.values())
        masks = f"masked {100.0 * zeros / total:.1f}% of tokens (prompts; {args.out}.{{train,val}}.mask.bin)"
    else:
        masks = "masked 0% (no prompt/response records, no mask files)"
    eos_note = f"EOS {eos}" if eos is not None else "no EOS"
    print(f"{PROG}: {len(docs)} documents ({len(docs) - len(val_docs)} train, {len(val_docs)} val), "
          f"tokens {n_train} train / {n_val} val, uint{8 * width}, vocab {vocab}, {eos_note}, {masks} "
          f"-> {args.out}.{{train,val}}.bin")


def main(argv=None):
    args = parse_args(argv)
    try:
        run(args)
    except PrepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
