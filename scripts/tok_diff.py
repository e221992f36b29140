#!/usr/bin/env python3
"""tok_diff.py - differential check of the tokenizer against a Python reference.

The reference re-implements llama.cpp's tokenizer independently and slowly:
the pre-tokenizer regexes run on the `regex` module over llama.cpp's
"collapsed" text (one character per code point: ASCII as is, other letters,
numbers and white space as one marker each), BPE and SPM merges are the plain
"best pair first, leftmost on ties" loops, special tokens are split out longest
first. Random texts mixing ASCII, contractions, digits, many scripts, Unicode
spaces, emoji, invalid UTF-8, NULs and special-token strings are encoded by both
and the id lists compared.

Usage: python3 scripts/tok_diff.py [N_CASES] [SEED] [VOCAB.gguf ...]
(needs `pip install regex` and a C compiler; default vocabs: ../shared/vocab)
"""
import bisect
import os
import random
import re as _re
import struct
import subprocess
import sys
import tempfile

import regex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model/gguf.h"
#include "model/tokenizer.h"
/* stdin: records "<flags> <len>\n<bytes>"; prints the ids of each on a line */
int main(int argc, char **argv)
{
	struct gguf_file *g;
	struct tok *t;
	struct tkv_error e;
	int fl;
	size_t len, n, i;

	if (argc < 2 || gguf_open(&g, argv[1], NULL, &e) || tok_init(&t, g, NULL, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	while (scanf("%d %zu", &fl, &len) == 2) {
		char *buf = malloc(len + 1);
		int32_t *ids;

		getchar();
		if (fread(buf, 1, len, stdin) != len)
			return 2;
		tok_encode(t, buf, len, fl & 2, fl & 1, NULL, 0, &n);
		ids = malloc((n + 1) * sizeof(*ids));
		tok_encode(t, buf, len, fl & 2, fl & 1, ids, n, &n);
		for (i = 0; i < n; i++)
			printf("%s%d", i ? " " : "", ids[i]);
		printf("\n");
		free(buf);
		free(ids);
	}
	tok_free(t);
	gguf_close(g);
	return 0;
}
"""


def rd(f, fmt):
    s = struct.calcsize(fmt)
    return struct.unpack('<' + fmt, f.read(s))


def rstr(f):
    (n,) = rd(f, 'Q')
    return f.read(n)


SC = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}


def rval(f, t):
    if t == 8:
        return rstr(f)
    if t == 9:
        (et,) = rd(f, 'I')
        (n,) = rd(f, 'Q')
        return [rval(f, et) for _ in range(n)]
    return rd(f, SC[t])[0]

def load(path):
    f=open(path,'rb'); magic,ver,nt,nkv=rd(f,'IIQQ'); d={}
    for i in range(nkv):
        k=rstr(f);(t,)=rd(f,'I');d[k.decode()]=rval(f,t)
    return d

# class table from the generated header
R=[]
for m in _re.finditer(r'\{ 0x([0-9A-F]+), 0x([0-9A-F]+), (\d) \}', open(os.path.join(ROOT, 'src/model/unicode_tab.h')).read()):
    R.append((int(m.group(1),16),int(m.group(2),16),int(m.group(3))))
LOS=[r[0] for r in R]
def cls(cp):
    i=bisect.bisect_right(LOS,cp)-1
    if i>=0 and R[i][0]<=cp<=R[i][1]: return R[i][2]
    return 0

def cpts_lenient(b):
    out=[]; i=0; n=len(b)
    while i<n:
        c=b[i]
        if c<0x80: out.append(c); i+=1; continue
        if not c&0x40: out.append(0xFFFD); i+=1; continue
        if not c&0x20: need,v=1,c&0x1f
        elif not c&0x10: need,v=2,c&0x0f
        elif not c&0x08: need,v=3,c&0x07
        else: out.append(0xFFFD); i+=1; continue
        if i+need>=n or any((b[i+k]&0xc0)!=0x80 for k in range(1,need+1)):
            out.append(0xFFFD); i+=1; continue
        for k in range(1,need+1): v=(v<<6)|(b[i+k]&0x3f)
        if v>0x10ffff: out.append(0xFFFD); i+=1; continue
        out.append(v); i+=need+1
    return out

def enc_utf8(cp):
    if cp<0x80: return bytes([cp])
    if cp<0x800: return bytes([0xc0|cp>>6,0x80|cp&0x3f])
    if cp<0x10000: return bytes([0xe0|cp>>12,0x80|(cp>>6)&0x3f,0x80|cp&0x3f])
    return bytes([0xf0|cp>>18,0x80|(cp>>12)&0x3f,0x80|(cp>>6)&0x3f,0x80|cp&0x3f])

def b2u():
    bs=list(range(0x21,0x7f))+list(range(0xa1,0xad))+list(range(0xae,0x100))
    cs=bs[:]; n=0
    for b in range(256):
        if b not in bs: bs.append(b); cs.append(256+n); n+=1
    return {b:chr(c) for b,c in zip(bs,cs)}
B2U=b2u()

L='[\u00d2A-Za-z]'; N='[\u00d10-9]'; S='[\t\n\x0b\x0c\r ]'
NOTLN_RN='[^\r\n\u00d2A-Za-z\u00d10-9]'; NOT_SLN='[^\t\n\x0b\x0c\r \u00d2A-Za-z\u00d10-9]'; NS='[^\t\n\x0b\x0c\r ]'
PAT={
 'llama3': "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"+NOTLN_RN+"?"+L+"+|"+N+"{1,3}| ?"+NOT_SLN+"+[\r\n]*|"+S+"*[\r\n]+|"+S+"+(?!"+NS+")|"+S+"+",
 'qwen2': "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"+NOTLN_RN+"?"+L+"+|"+N+"| ?"+NOT_SLN+"+[\r\n]*|"+S+"*[\r\n]+|"+S+"+(?!"+NS+")|"+S+"+",
 'gpt2': "'s|'t|'re|'ve|'m|'ll|'d| ?"+L+"+| ?"+N+"+| ?"+NOT_SLN+"+|"+S+"+(?!"+NS+")|"+S+"+",
}
def collapse(cps):
    out=[]
    for c in cps:
        if c<128: out.append(chr(c)); continue
        k=cls(c)
        out.append({3:'\x0b',1:'\u00d2',2:'\u00d1'}.get(k,'\u00d0'))
    return ''.join(out)

class Vocab:
    def __init__(s,path):
        d=load(path)
        s.model=d['tokenizer.ggml.model'].decode()
        s.toks=d['tokenizer.ggml.tokens']; s.n=len(s.toks)
        s.types=d.get('tokenizer.ggml.token_type',[1]*s.n)
        s.scores=d.get('tokenizer.ggml.scores',[0.0]*s.n)
        s.idx={}
        for i,t in enumerate(s.toks):
            s.idx.setdefault(t,i)
        s.ranks={}
        for i,m in enumerate(d.get('tokenizer.ggml.merges',[])):
            p=m.find(b' ',1)
            if p>=0: s.ranks.setdefault((m[:p],m[p+1:]),i)
        pre=d.get('tokenizer.ggml.pre',b'default').decode()
        s.pre={'llama-bpe':'llama3','llama3':'llama3','qwen2':'qwen2'}.get(pre,'gpt2')
        s.ignore_merges = s.pre=='llama3'
        s.bos=d.get('tokenizer.ggml.bos_token_id', 1 if s.model=='llama' else 11)
        attr=[]
        for t in s.types: attr.append({2:'unk',3:'ctl',4:'usr'}.get(t,''))
        for name in [b'<|eot_id|>',b'<|im_end|>',b'<|end|>',b'<end_of_turn>',b'<|endoftext|>',b'<|eom_id|>',b'<|end_of_text|>']:
            if name in s.idx: attr[s.idx[name]]='ctl'
        s.attr=attr
        sp=[i for i in range(s.n) if attr[i]]
        sp.sort(key=lambda i:(-len(s.toks[i]),i))
        s.special=sp
    def partition(s,text,parse_special):
        frags=[(text,None)] if text else []
        for sid in s.special:
            if not parse_special and s.attr[sid] in ('ctl','unk'): continue
            st=s.toks[sid]; nf=[]
            for f,i in frags:
                if i is not None: nf.append((f,i)); continue
                while True:
                    p=f.find(st)
                    if p<0: break
                    if p>0: nf.append((f[:p],None))
                    nf.append((b'',sid)); f=f[p+len(st):]
                if f: nf.append((f,None))
            frags=nf
        return frags
    def spm(s,text,prefix):
        t=(b'\xe2\x96\x81' if prefix else b'')+text.replace(b' ',b'\xe2\x96\x81')
        syms=[]; i=0
        while i<len(t):
            l=[1]*12+[2,2,3,4]; cl=min(l[t[i]>>4],len(t)-i); syms.append(t[i:i+cl]); i+=cl
        while True:
            best=None
            for j in range(len(syms)-1):
                m=syms[j]+syms[j+1]
                if m in s.idx:
                    sc=s.scores[s.idx[m]]
                    if best is None or sc>best[0]: best=(sc,j)
            if best is None: break
            j=best[1]; syms[j:j+2]=[syms[j]+syms[j+1]]
        out=[]
        for y in syms:
            if y in s.idx: out.append(s.idx[y])
            else:
                for b in y:
                    k=b'<0x%02X>'%b
                    out.append(s.idx[k] if k in s.idx else s.idx.get(bytes([b]),0))
        return out
    def bpe(s,text):
        cps=cpts_lenient(text); col=collapse(cps); out=[]
        spans=[]; last=0
        for m in regex.finditer(PAT[s.pre],col):
            if m.start()>last: spans.append((last,m.start()))
            spans.append((m.start(),m.end())); last=m.end()
        if last<len(col): spans.append((last,len(col)))
        for a,b in spans:
            wb=b''.join(enc_utf8(c) for c in cps[a:b])
            w=''.join(B2U[x] for x in wb).encode()
            if s.ignore_merges and w in s.idx: out.append(s.idx[w]); continue
            syms=[]; i=0
            while i<len(w):
                cl=[1]*12+[2,2,3,4]; c=cl[w[i]>>4]; syms.append(w[i:i+c]); i+=c
            while True:
                best=None
                for j in range(len(syms)-1):
                    r=s.ranks.get((syms[j],syms[j+1]))
                    if r is not None and (best is None or r<best[0]): best=(r,j)
                if best is None: break
                j=best[1]; syms[j:j+2]=[syms[j]+syms[j+1]]
            for y in syms:
                if y in s.idx: out.append(s.idx[y])
                else:
                    for x in y:
                        if bytes([x]) in s.idx: out.append(s.idx[bytes([x])])
        return out
    def encode(s,text,add_bos,parse_special):
        out=[s.bos] if add_bos else []
        prev=True
        for f,i in s.partition(text,parse_special):
            if i is not None: out.append(i); prev=True; continue
            if s.model=='llama': out+=s.spm(f,prev)
            else: out+=s.bpe(f)
            prev=False
        return out

PALETTE=[b'a',b'Z',b'x',b'hello',b'World',b'0',b'7',b'123',b'12345',b' ',b' ',b'  ',b'\t',b'\n',b'\r',b'\r\n',b'\x0b',b'\x0c',b"'",b"'s",b"'S",b"'re",b"'VE",b"'ll",b"'d",b"'M",b"'x",
 b'.',b',',b'!',b'?',b'(',b')',b'-',b'==',b'"',b'$',b'\xc3\xa9',b'\xc3\x9f',b'\xc2\xa0',b'\xc2\x85',b'\xe2\x80\x83',b'\xe3\x80\x80',b'\xe2\x80\xa8',b'\xe4\xb8\xad',b'\xe6\x96\x87',
 b'\xd9\xa3',b'\xe2\x85\xa2',b'\xc2\xb2',b'\xf0\x9f\x98\x80',b'\xf0\x9f\xa6\x99',b'\xcc\x81',b'\xe2\x80\x8d',b'\xef\xb8\x8f',b'\xe2\x96\x81',b'\xff',b'\x80',b'\xc3',b'\xe2\x82',b'\xc0\x80',b'\xed\xa0\x80',b'\xf4\x90\x80\x80',b'\x00',b'\x1f',b'\x7f',
 b'\xe1\x9e\x80',b'\xe0\xa4\xa8\xe0\xa5\x8d',b'\xd0\xb6',b'<s>',b'</s>',b'<unk>',b'<|begin_of_text|>',b'<|eot_id|>',b'<|endoftext|>',b'<|im_start|>',b'[PAD151646]',b'\xf3\xa0\x80\x81',b'\xf0\x90\x8d\x88']
def rand_text(r):
    return b''.join(r.choice(PALETTE) for _ in range(r.randint(0,14)))


def build_harness(tmp):
    exe = os.path.join(tmp, "tok_harness")
    src = os.path.join(tmp, "tok_harness.c")
    with open(src, "w") as f:
        f.write(HARNESS)
    srcs = [os.path.join(ROOT, p) for p in (
        "src/model/tokenizer.c", "src/model/gguf.c", "src/util/alloc.c",
        "src/util/status.c", "src/ops/dtype.c")]
    subprocess.run(["cc", "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE",
                    "-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "src"),
                    src] + srcs + ["-lm", "-o", exe], check=True)
    return exe


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    paths = sys.argv[3:] or [os.path.join(ROOT, "..", "shared", "vocab", "ggml-vocab-%s.gguf" % v)
                             for v in ("llama-spm", "llama-bpe", "qwen2")]
    bad_total = 0
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_harness(tmp)
        for path in paths:
            v = Vocab(path)
            r = random.Random(seed)
            cases = [(rand_text(r), r.randint(0, 3)) for _ in range(n)]
            inp = b''.join(b'%d %d\n' % (fl, len(t)) + t for t, fl in cases)
            res = subprocess.run([exe, path], input=inp, capture_output=True, check=True)
            lines = res.stdout.decode().split('\n')
            bad = 0
            for k, (t, fl) in enumerate(cases):
                want = v.encode(t, fl & 2, fl & 1)
                got = [int(x) for x in lines[k].split()] if lines[k] else []
                if want != got:
                    bad += 1
                    if bad <= 5:
                        print('MISMATCH', repr(t), 'flags', fl, '\n  want', want, '\n  got ', got)
            print('%s: %d cases, %d mismatches' % (os.path.basename(path), n, bad))
            bad_total += bad
    return 1 if bad_total else 0


if __name__ == '__main__':
    sys.exit(main())
