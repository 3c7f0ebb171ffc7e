"""Tokenization speed and parity: original-equivalent, reference Python, in-graph, Hugging Face.

Tokenizes the same lines with
  1. `NaiveTokenizer` below: a character-by-character implementation of ORIGINAL_RELEASE.md
     section 5, written the way the original release works, standing in for its speed;
  2. `bert_tf.tokenization.FullTokenizer` (our pure-Python reference);
  3. `bert_tf.text.InGraphTokenizer` (our in-graph fast path);
  4. Hugging Face `tokenizers` (Rust) built from the same vocab, if importable;
and prints MB/s, wordpieces/s, the speed ratio against (1) and the fraction of lines whose ids
equal the reference's (2).

Usage (from the repository root):
  python benchmarks/tokenization.py --do_lower_case=true

By default the input is the repository's English corpora and its Chinese sample
(benchmarks/corpora.py) with the bert-base-uncased vocab; --input_files and --vocab_file take
others.

--check compares only the in-graph tokenizer with the reference on every line (no timing table)
and exits with status 1 if any line differs: the corpus parity check.

The timings go to benchmarks/results/tokenization_DATE.json (benchmarks/results_file.py);
--smoke times 20 kB of tests/data/cpd_austen_100k.txt once and writes to a temporary folder.
"""

import argparse
import glob
import os
import sys
import time
import unicodedata

# Run as a script from the repository root: make `bert_tf` importable without installation.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpora  # pylint: disable=g-import-not-at-top,wrong-import-position
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position
from bert_tf import cli  # pylint: disable=g-import-not-at-top,wrong-import-position


# === (1) Naive original-equivalent tokenizer ===


class NaiveTokenizer:
  """Character-at-a-time BERT tokenization, the original release's algorithm and speed profile.

  Deliberately unoptimised (per-character unicodedata calls, per-character string building,
  substring probing in WordPiece) so its timing stands in for the original FullTokenizer.
  """

  def __init__(self, vocab_file, do_lower_case):
    self.vocab = {}
    with open(vocab_file, encoding="utf-8") as f:
      for index, line in enumerate(f):
        self.vocab[line.strip()] = index
    self.do_lower_case = do_lower_case
    self.unk_id = self.vocab["[UNK]"]

  @staticmethod
  def _is_cjk(cp):
    return ((0x4E00 <= cp <= 0x9FFF) or (0x3400 <= cp <= 0x4DBF) or
            (0x20000 <= cp <= 0x2A6DF) or (0x2A700 <= cp <= 0x2B73F) or
            (0x2B740 <= cp <= 0x2B81F) or (0x2B820 <= cp <= 0x2CEAF) or
            (0xF900 <= cp <= 0xFAFF) or (0x2F800 <= cp <= 0x2FA1F))

  @staticmethod
  def _is_space(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"

  @staticmethod
  def _is_control(ch):
    if ch in "\t\n\r":
      return False
    return unicodedata.category(ch) in ("Cc", "Cf")

  @staticmethod
  def _is_punct(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
      return True
    return unicodedata.category(ch).startswith("P")

  def _basic(self, text):
    cleaned = []
    for ch in text:
      cp = ord(ch)
      if cp == 0 or cp == 0xFFFD or self._is_control(ch):
        continue
      cleaned.append(" " if self._is_space(ch) else ch)
    spaced = []
    for ch in "".join(cleaned):
      if self._is_cjk(ord(ch)):
        spaced.extend([" ", ch, " "])
      else:
        spaced.append(ch)
    words = []
    for token in "".join(spaced).strip().split():
      if self.do_lower_case:
        token = token.lower()
        token = "".join(c for c in unicodedata.normalize("NFD", token)
                        if unicodedata.category(c) != "Mn")
      pieces = []
      new_word = True
      for ch in token:
        if self._is_punct(ch):
          pieces.append([ch])
          new_word = True
        else:
          if new_word:
            pieces.append([])
          new_word = False
          pieces[-1].append(ch)
      words.extend("".join(p) for p in pieces)
    return " ".join(words).strip().split()

  def _wordpiece(self, word):
    chars = list(word)
    if len(chars) > 200:
      return [self.unk_id]
    ids = []
    start = 0
    while start < len(chars):
      end = len(chars)
      found = None
      while start < end:
        piece = "".join(chars[start:end])
        if start > 0:
          piece = "##" + piece
        if piece in self.vocab:
          found = self.vocab[piece]
          break
        end -= 1
      if found is None:
        return [self.unk_id]
      ids.append(found)
      start = end
    return ids

  def tokenize_to_ids(self, text):
    ids = []
    for word in self._basic(text):
      ids.extend(self._wordpiece(word))
    return ids


# === Timing harness ===


def read_lines(patterns, max_mb):
  """Lines (without their "\\n") of every file matching the comma-separated globs, in order.

  Stops after max_mb megabytes (0 = no limit). Lines are split on "\\n" only, as the data
  preparation reads them, so U+2028 and "\\r" inside a line reach the tokenizers.
  """
  lines = []
  total = 0
  limit = int(max_mb * 1e6) if max_mb else None
  for pattern in patterns.split(","):
    paths = sorted(glob.glob(pattern))
    if not paths:
      raise FileNotFoundError("--input_files: nothing matches %r" % pattern)
    for path in paths:
      with open(path, "rb") as f:
        for number, raw in enumerate(f.read().split(b"\n")):
          try:
            line = raw.decode("utf-8")
          except UnicodeDecodeError as e:
            raise ValueError("%s:%d: invalid UTF-8 (%s)" % (path, number + 1, e.reason)) from None
          lines.append(line)
          total += len(raw) + 1
          if limit is not None and total >= limit:
            return lines
  return lines


def _timed(fn, repeats=1):
  """(result, seconds) of the fastest of `repeats` calls of fn()."""
  best = None
  for _ in range(repeats):
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    best = seconds if best is None else min(best, seconds)
  return result, best


def _hf_tokenizer(vocab_file, do_lower_case):
  """Hugging Face's Rust BERT tokenizer over the same vocab, or None if not installed."""
  try:
    import tokenizers  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return tokenizers.BertWordPieceTokenizer(
      vocab_file, clean_text=True, handle_chinese_chars=True,
      strip_accents=do_lower_case, lowercase=do_lower_case, wordpieces_prefix="##")


def run_check(lines, vocab_file, do_lower_case, batch_size, num_threads):
  """Compares the in-graph tokenizer with the reference on every line; returns #differences."""
  from bert_tf import text, tokenization  # pylint: disable=g-import-not-at-top
  reference = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  fast = text.InGraphTokenizer(vocab_file, do_lower_case=do_lower_case)
  got = fast.tokenize_lines(lines, batch_size=batch_size, num_threads=num_threads)
  differ = 0
  for number, (line, ids) in enumerate(zip(lines, got)):
    expected = reference.tokenize_to_ids(line)
    if ids != expected:
      differ += 1
      if differ <= 10:
        print("line %d differs: %r\n  reference %s\n  in-graph  %s" %
              (number + 1, line[:200], expected[:30], ids[:30]))
  print("do_lower_case=%s: %d of %d lines differ" % (do_lower_case, differ, len(lines)))
  return differ


def run_benchmark(lines, vocab_file, do_lower_case, batch_size, num_threads, skip_naive,
                  repeats):
  """Times every tokenizer on `lines` and prints the table."""
  from bert_tf import text, tokenization  # pylint: disable=g-import-not-at-top
  megabytes = sum(len(line.encode("utf-8")) + 1 for line in lines) / 1e6
  rows = []

  def run_reference():
    # A fresh tokenizer each time: its word cache is part of its speed, warming it is not.
    reference = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    return [reference.tokenize_to_ids(l) for l in lines]
  # Its regular expressions are compiled once per process (a scan of all of Unicode); that is
  # start-up, like the in-graph tokenizer's construction, so it stays out of the timing.
  tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case).tokenize("é 中 warm-up")
  ref_ids, ref_time = _timed(run_reference, repeats)

  if not skip_naive:
    naive = NaiveTokenizer(vocab_file, do_lower_case)
    ids, seconds = _timed(lambda: [naive.tokenize_to_ids(l) for l in lines], repeats)
    rows.append(("original-equivalent (naive Python)", ids, seconds))
  rows.append(("bert_tf.tokenization.FullTokenizer", ref_ids, ref_time))

  fast, build_seconds = _timed(
      lambda: text.InGraphTokenizer(vocab_file, do_lower_case=do_lower_case))
  # Trace once outside the timing: serving traces at export, not per request.
  _, trace_seconds = _timed(lambda: fast.tokenize_lines(lines[:8]))
  ids, seconds = _timed(
      lambda: fast.tokenize_lines(lines, batch_size=batch_size, num_threads=num_threads), repeats)
  rows.append(("bert_tf.text.InGraphTokenizer", ids, seconds))

  hf = _hf_tokenizer(vocab_file, do_lower_case)
  if hf is not None:
    def run_hf():
      encodings = hf.encode_batch(lines, add_special_tokens=False)
      return [e.ids for e in encodings]
    ids, seconds = _timed(run_hf, repeats)
    rows.append(("HF tokenizers BertWordPieceTokenizer (Rust)", ids, seconds))

  base_seconds = rows[0][2]
  table = []
  print("%d lines, %.2f MB, do_lower_case=%s; in-graph build %.1f s, first call %.1f s" %
        (len(lines), megabytes, do_lower_case, build_seconds, trace_seconds))
  header = "| tokenizer | MB/s | wordpieces/s | speed vs %s | lines equal to reference |" % (
      "original" if not skip_naive else "reference")
  print(header)
  print("| --- | ---: | ---: | ---: | ---: |")
  for name, ids, seconds in rows:
    pieces = sum(len(x) for x in ids)
    same = sum(a == b for a, b in zip(ids, ref_ids)) / max(1, len(lines))
    print("| %s | %.2f | %s | %.1fx | %.4f%% |" % (
        name, megabytes / seconds, "{:,.0f}".format(pieces / seconds),
        base_seconds / seconds, 100 * same))
    table.append(dict(tokenizer=name, mb_per_second=megabytes / seconds,
                      wordpieces_per_second=pieces / seconds, speedup=base_seconds / seconds,
                      lines_equal_to_reference=same))
  return dict(do_lower_case=do_lower_case, lines=len(lines), megabytes=megabytes,
              build_seconds=build_seconds, first_call_seconds=trace_seconds,
              speedup_against="original" if not skip_naive else "reference", rows=table)


def main(argv=None):
  cli.choose_cpu_kernels()  # the commands' kernels, before the in-graph tokenizer loads TensorFlow
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--input_files", default=",".join(corpora.paths() + [corpora.CHINESE_60K]),
                      help="comma-separated globs of text files, one sentence per line")
  parser.add_argument("--vocab_file",
                      default=corpora.VOCAB_FILE)
  parser.add_argument("--do_lower_case", default="true",
                      help="true, false, or both (run twice)")
  parser.add_argument("--max_mb", type=float, default=0,
                      help="use only the first MB of input (0 = all)")
  parser.add_argument("--batch_size", type=int, default=1024,
                      help="lines per in-graph call")
  parser.add_argument("--num_threads", type=int, default=None,
                      help="in-graph batches run at once (default: CPUs, at most 4)")
  parser.add_argument("--repeats", type=int, default=1,
                      help="time each tokenizer this many times and keep the fastest")
  parser.add_argument("--skip_naive", action="store_true",
                      help="leave out the slow original-equivalent tokenizer")
  parser.add_argument("--check", action="store_true",
                      help="only compare in-graph ids with the reference; exit 1 on any difference")
  results_file.add_arguments(parser)
  args = parser.parse_args(argv)
  if args.smoke:
    args.input_files, args.max_mb, args.repeats = corpora.AUSTEN_100K, 0.02, 1

  choices = {"true": [True], "false": [False], "both": [True, False]}
  if args.do_lower_case.lower() not in choices:
    parser.error("--do_lower_case must be true, false or both, got %r" % args.do_lower_case)
  lines = read_lines(args.input_files, args.max_mb)
  differ = 0
  runs = []
  for do_lower_case in choices[args.do_lower_case.lower()]:
    if args.check:
      differ += run_check(lines, args.vocab_file, do_lower_case, args.batch_size,
                          args.num_threads)
    else:
      runs.append(run_benchmark(lines, args.vocab_file, do_lower_case, args.batch_size,
                                args.num_threads, args.skip_naive, args.repeats))
  if runs:
    results_file.write("tokenization", dict(runs=runs), args.smoke, args.results_file)
  return 1 if differ else 0


if __name__ == "__main__":
  sys.exit(main())
