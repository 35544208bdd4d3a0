# Oracle for the Go tokenizer tests: prints, per file named on the command line, the
# tokens Python's own tokenize module produces, as JSON [type, string, line].
import json
import sys
import tokenize

out = {}
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        toks = []
        for t in tokenize.tokenize(f.readline):
            if t.type == tokenize.ENCODING:
                continue
            name = tokenize.tok_name[t.type]
            toks.append([name, t.string, t.start[0]])
        out[path] = toks
json.dump(out, sys.stdout)
