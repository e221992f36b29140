#!/usr/bin/python3
"""lc_corpus.py OUTDIR - the corpus and vocabulary of the long-context model.

Everything comes from Debian 12 packages (install them first):
  apt-get install bible-kjv golang-1.19-src python3.11-doc libpython3.11-testsuite \
      postgresql-doc-15 sqlite3-doc rust-src sentencepiece

| source  | package                              | what                              | license             |
|---------|--------------------------------------|-----------------------------------|---------------------|
| kjv     | bible-kjv                            | King James Bible, 57 training books| public domain       |
| pydoc   | python3.11-doc                       | Python docs, reStructuredText     | PSF-2.0             |
| pgdoc   | postgresql-doc-15                    | PostgreSQL docs, HTML as text     | PostgreSQL (BSD-like)|
| sqlite  | sqlite3-doc                          | SQLite docs, HTML as text         | public domain       |
| python  | libpython3.11-stdlib + -testsuite    | Python standard library (.py)     | PSF-2.0             |
| go      | golang-1.19-src                      | Go standard library (.go)         | BSD-3-Clause        |
| rust    | rust-src                             | Rust std library and compiler (.rs)| MIT OR Apache-2.0  |

The King James Bible is split exactly as tools/train/corpus.sh splits it:
dev = Ruth, Jonah, Philemon, Jude; reserved (never trained on, never used
for model selection) = Esther, Joel, Titus, 2 John, 3 John; train = the
other 57 books. Every other source gives every 100th document (sorted by
path) to dev and the rest to train.

Writes to OUTDIR:
  kjv/                 corpus.sh's output (books/, train/, dev/, reserved/)
  SRC.train.xz         each source's training documents, separated by "\\x1d"
  dev.xz               the dev documents of every source, the same way
  lc.model lc.vocab    SentencePiece BPE, VOCAB_SIZE (default 8192) pieces,
                       byte fallback, digits split into single tokens,
                       whitespace-only pieces (code indentation) allowed
  stats.txt            documents and bytes per source
The same packages give the same files (sorted inputs, fixed seed).
"""
import html.parser
import lzma
import os
import random
import re
import subprocess
import sys

SEP = "\x1d"
HERE = os.path.dirname(os.path.abspath(__file__))


class _Text(html.parser.HTMLParser):
    """Visible text of an HTML page, block elements on their own lines."""
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "table",
             "dt", "dd", "blockquote", "hr", "title", "section"}
    SKIP = {"script", "style", "head"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.skip, self.pre = [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        elif tag == "pre":
            self.pre += 1
            self.out.append("\n")
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag == "pre":
            self.pre = max(0, self.pre - 1)
            self.out.append("\n")
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if self.skip:
            return
        self.out.append(data if self.pre else re.sub(r"\s+", " ", data))

    def text(self):
        lines = [l.rstrip() for l in "".join(self.out).split("\n")]
        return re.sub(r"\n{3,}", "\n\n", "\n".join(l if l.strip() else "" for l in lines)).strip() + "\n"


def html_text(path):
    p = _Text()
    with open(path, encoding="utf-8", errors="replace") as f:
        p.feed(f.read())
    return p.text()


def files(root, exts, skip=()):
    out = []
    for d, dirs, fs in os.walk(root):
        dirs.sort()
        if any(s in d.split(os.sep) for s in skip):
            continue
        out += [os.path.join(d, f) for f in sorted(fs) if f.endswith(exts)]
    return sorted(out)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def need(path, pkg):
    if not os.path.exists(path):
        sys.exit(f"lc_corpus.py: {path} missing (apt-get install {pkg})")


def sources():
    """(name, list of document texts); each document a file."""
    py_root = "/usr/lib/python3.11"
    need("/usr/share/go-1.19/src", "golang-1.19-src")
    need("/usr/share/doc/python3.11/html/_sources", "python3.11-doc")
    need("/usr/share/doc/postgresql-doc-15/html", "postgresql-doc-15")
    need("/usr/share/doc/sqlite3", "sqlite3-doc")
    need(py_root + "/test", "libpython3.11-testsuite")
    need("/usr/src/rustc-1.63.0/library", "rust-src")
    yield "pydoc", [read(p) for p in files("/usr/share/doc/python3.11/html/_sources", (".txt",))]
    yield "pgdoc", [html_text(p) for p in files("/usr/share/doc/postgresql-doc-15/html", (".html",))]
    yield "sqlite", [html_text(p) for p in files("/usr/share/doc/sqlite3", (".html",))]
    yield "python", [read(p) for p in files(py_root, (".py",), skip=("site-packages", "dist-packages"))]
    yield "go", [read(p) for p in files("/usr/share/go-1.19/src", (".go",), skip=("testdata", "vendor"))]
    yield "rust", [read(p) for p in files("/usr/src/rustc-1.63.0", (".rs",), skip=("test", "tests", "debian"))]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: lc_corpus.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    vocab = int(os.environ.get("VOCAB_SIZE", "8192"))
    env = dict(os.environ, VOCAB_SIZE="2048")
    subprocess.run(["sh", os.path.join(HERE, "corpus.sh"), os.path.join(out, "kjv")], check=True, env=env)
    kjv = os.path.join(out, "kjv")
    docs = {"kjv": [read(p) for p in files(kjv + "/train", (".txt",))]}
    dev = ["".join(read(p) for p in files(kjv + "/dev", (".txt",)))]
    for name, ds in sources():
        ds = [d.replace(SEP, " ") for d in ds if len(d.strip()) > 64]
        dev += ds[::100]
        docs[name] = [d for i, d in enumerate(ds) if i % 100]
    stats = []
    for name, ds in docs.items():
        with lzma.open(os.path.join(out, name + ".train.xz"), "wt", encoding="utf-8", preset=9) as f:
            f.write(SEP.join(ds))
        stats.append(f"{name}\t{len(ds)} documents\t{sum(len(d.encode()) for d in ds)} bytes")
    with lzma.open(os.path.join(out, "dev.xz"), "wt", encoding="utf-8", preset=9) as f:
        f.write(SEP.join(dev))
    # The vocabulary's input: lines sampled with the training mixture's weights
    # (natural text weighted up so that English words get whole pieces).
    rng = random.Random(1)
    weight = {"kjv": 3.0, "pydoc": 2.0, "pgdoc": 2.0, "sqlite": 2.0, "python": 0.5, "go": 0.5, "rust": 0.5}
    spm_in = os.path.join(out, "spm_input.txt")
    with open(spm_in, "w", encoding="utf-8") as f:
        for name, ds in docs.items():
            for d in ds:
                for line in d.split("\n"):
                    if line.strip() and rng.random() < weight[name] * 0.25:
                        f.write(line + "\n")
    subprocess.run(["spm_train", f"--input={spm_in}", f"--model_prefix={out}/lc", f"--vocab_size={vocab}",
                    "--model_type=bpe", "--byte_fallback=true", "--character_coverage=0.9999",
                    "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
                    "--split_digits=true", "--allow_whitespace_only_pieces=true",
                    "--unk_id=0", "--bos_id=1", "--eos_id=2", "--pad_id=-1", "--num_threads=2",
                    "--input_sentence_size=4000000", "--shuffle_input_sentence=true", "--seed_sentencepiece_size=1000000",
                    "--minloglevel=2"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["spm_export_vocab", f"--model={out}/lc.model", f"--output={out}/lc.vocab",
                    "--output_format=vocab"], check=True)
    os.remove(spm_in)
    with open(os.path.join(out, "stats.txt"), "w") as f:
        f.write("\n".join(stats) + f"\ndev\t{len(dev)} documents\n")
    print("\n".join(stats), file=sys.stderr)


if __name__ == "__main__":
    main()
