#!/usr/bin/env python3
"""Writes a byte-level tokenizer for the qwen2 demo: the 256 byte values (token id = byte
value) and <|endoftext|> (id 256), 257 tokens in all.

    byte_tokenizer.py --out DIR

DIR/tokenizer.json is a `tokenizers` BPE model with no merges over the 256 symbols of the
ByteLevel alphabet (GPT-2's byte-to-character map), the ByteLevel pre-tokenizer and
decoder: every UTF-8 text encodes to its bytes and decodes back exactly.
DIR/tokenizer_config.json and DIR/special_tokens_map.json name <|endoftext|> as the EOS
(and pad) token, so `transformers.AutoTokenizer.from_pretrained(DIR)` loads it, and
examples/qwen2/prepare.py --model DIR separates documents with it.

Needs the `tokenizers` package (scripts/deps installs it).
"""
import argparse
import json
import os
import sys

EOS = "<|endoftext|>"
EOS_ID = 256


def byte_to_char():
    """GPT-2's map of the 256 bytes to printable characters (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def build():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    chars = byte_to_char()
    vocab = {chars[b]: b for b in range(256)}
    # Every ByteLevel symbol is in the vocabulary; a check that the map is the one the
    # pre-tokenizer uses (its alphabet), so no byte can ever be unknown.
    assert set(vocab) == set(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(EOS, special=True, normalized=False)])
    assert tok.token_to_id(EOS) == EOS_ID
    return tok


def write(out):
    os.makedirs(out, exist_ok=True)
    tok = build()
    tok.save(os.path.join(out, "tokenizer.json"))
    eos = {"content": EOS, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
           "special": True}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1 << 30,
        "bos_token": None,
        "eos_token": EOS,
        "pad_token": EOS,
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,  # decode must not touch spaces: exact round trips
        "added_tokens_decoder": {str(EOS_ID): eos},
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token": eos, "pad_token": eos}, f, indent=2)
        f.write("\n")
    # Round trip check on the way out: a broken tokenizer never reaches prepare.py.
    sample = "Hello, world!\n\tnaïve café — 日本語 🙂 \r\n  trailing  "
    ids = tok.encode(sample, add_special_tokens=False).ids
    assert ids == list(sample.encode("utf-8")), "byte ids"
    assert tok.decode(ids + [EOS_ID], skip_special_tokens=False) == sample + EOS, "round trip"
    return tok


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="byte_tokenizer.py",
        description="Write a byte-level tokenizer (256 bytes + <|endoftext|> = id 256) to DIR: "
                    "tokenizer.json, tokenizer_config.json, special_tokens_map.json.")
    ap.add_argument("--out", required=True, metavar="DIR", help="the folder to write (created if missing)")
    args = ap.parse_args(argv)
    try:
        import tokenizers  # noqa: F401
    except ImportError as e:
        print(f"byte_tokenizer.py: {e}; install it with scripts/deps (pip install tokenizers)", file=sys.stderr)
        return 1
    try:
        tok = write(args.out)
    except OSError as e:
        print(f"byte_tokenizer.py: {e.filename or args.out}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"byte_tokenizer.py: {args.out}: tokenizer.json, tokenizer_config.json, special_tokens_map.json "
          f"({tok.get_vocab_size(with_added_tokens=True)} tokens: bytes 0-255, {EOS} = {EOS_ID})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
