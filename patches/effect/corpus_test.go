package effect

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// pyCorpus holds generated Python files with the cases a reader gets wrong: names in
// comments, docstrings and f-strings, defs inside strings, nested classes, decorators,
// calls inside nested defs, line continuations, tabs, every string prefix.
func pyCorpus() map[string]string {
	files := map[string]string{
		"comments.py": `"""Module docstring: def fake_method(self): self.target()"""
import os


class Buffer:
    """Buffer docstring.

    def not_a_method(self):
        self.target()
    """
    # def commented_method(self): self.target()

    def __init__(self, x):
        # self.in_comment() in a comment
        s = "self.in_string()"
        t = f"self.in_fstring_text() {x!r:>10}"
        u = f"{self.in_fstring_field()}"
        self.real_call(
            x,
        )
        y = 1 + \
            self.after_backslash()
        z = [self
             .split_over_lines(
             )]
        self.attribute_only
        (self).parenthesized()
        print(self).not_self()

    def target(self):
        return 'def fake(self):'

    def __repr__(self): return 'def also_fake(self): pass'
`,
		"nested.py": `import functools


def deco(f):
    return f


class Outer:
    class Inner:
        @staticmethod
        def helper():
            pass

        @deco
        @functools.lru_cache(
            maxsize=None,
        )
        async def fetch(self):
            await self.inner_call()
            Inner.by_class_name()

    @property
    def value(self):
        def never_called():
            self.hidden()

        def called():
            self.via_nested()
            deeper()

            def deeper():
                self.via_deeper()

        def chain():
            self.via_chain()

        def start():
            chain()

        called()
        start()
        return Outer.class_call(self)

    @value.setter
    def value(self, v):
        super().value_setter(v)
        super(Outer, self).other(v)

    if True:
        def conditional(self):
            pass
    else:
        def conditional_else(self):
            self.in_else()
    try:
        def in_try(self): self.one_liner()
    except Exception:
        pass

    def make_class(self):
        class Local:
            x = self.in_class_body()

            def m(inner_self):
                self.in_local_method()
        lam = lambda: self.in_lambda()

        def with_default(a=self.in_default(), *, b: int = 0) -> None:
            self.in_uncalled_body()
        return Local, lam


class Second(Outer, metaclass=type):
    pass


def top_level(self):
    class InFunc:
        def inner_method(self):
            pass
    return InFunc
`,
		"tabs.py": "class T:\n" +
			"\tdef a(self):\n" +
			"\t\tif self.x():\n" +
			"\t\t\tself.y()\n" +
			"\t\treturn [\n" +
			"\t\t\tself.z(),\n" +
			"\t\t]\n" +
			"\n" +
			"\t# comment at a lower indentation\n" +
			"  \t\n" +
			"\tdef b(self): pass\n" +
			"\n" +
			"\tdef c(self):\n" +
			"\t\tself.after_blank()\n",
		"strings.py": `class S:
    def m(self, x, width):
        a = r'\d' + R"x\"" + b'\x00' + Rb'\\' + bR"" + rb'' + u'\u00fc' + U"x" + BR'y'
        b = F"{self.f1()}" + fr'{self.f2()}\d' + Rf"{ {'k': 1}['k'] }" + rF'{{literal}}' + fR"{x}"
        c = '''triple ' " 'def fake(self):'
        self.not_in_code()
        '''
        d = """a\
b"""
        e = 'single \
continued'
        f = f"""{
            self.multi_line_field()
        }"""
        g = f'{x:{width}.{self.prec()}}'
        h = f"{'}'}" f'{"{"}'
        i = f"{x!r}" f"{x=}" f"{{self.not_a_call()}}"
        j = 0x1F + 0o7 + 0b1 + 1_000 + 1.5e-3 + .5 + 3j + 1e10 + 1E+5 + 0XAB
        k = '\'' "\"" '''\''''
        return [a, b, c, d, e, f, g, h, i, j, k]

    def after_strings(self):
        self.still_found()
`,
		"env.py": `import os
import sys, os as _os
from os import environ, getenv as ge
from os import (
    path,
    environ as env2,
)

A = os.environ['EP_A']
B = os.environ.get('EP_B', 'x')
C = os.getenv("EP_C")
if 'EP_D' in os.environ:
    pass
if "EP_E" not in os.environ:
    pass
E = environ['EP_F']
F = environ.get('EP_G')
G = ge('EP_H')
H = _os.environ["EP_I"]
os.environ['EP_WRITE'] = '1'
os.environ['EP_AUG'] += 'x'
del os.environ['EP_DEL']
# os.environ['EP_COMMENT']
S = "os.environ['EP_STRING']"
T = f"{os.environ['EP_FSTRING']}"
U = os.environ['EP_' 'CONCAT']
V = env2[
    "EP_MULTILINE"
]
W = os.environ.get(f'EP_{A}')
X = sys.environ['EP_NOT_OS']
Y = 'EP_KEYS' in os.environ.keys()


class Reader:
    def read(self):
        return os.getenv('EP_IN_METHOD', None)
`,
		"edge.py": "# -*- coding: utf-8 -*-\n" +
			"import typing\n" +
			"\n" +
			"\f\n" +
			"class Ünïcode(typing.NamedTuple if True else object):\n" +
			"    größe: int = 0\n" +
			"\n" +
			"    def métode(self, k=lambda: 1, *args, **kw) -> typing.Dict[str, \"x:y\"]:\n" +
			"        if (n := len(args)) > 1: self.walrus(n)\n" +
			"        x = 1; self.after_semicolon()\n" +
			"        match k:\n" +
			"            case 1:\n" +
			"                self.in_case()\n" +
			"            case _:\n" +
			"                pass\n" +
			"        async def coro():\n" +
			"            async with self.ctx() as c:\n" +
			"                pass\n" +
			"        return coro\n" +
			"\n" +
			"    def split_header(self,\n" +
			"                     a,\n" +
			"                     b) \\\n" +
			"            -> None:\n" +
			"        self.from_split()\n" +
			"\n" +
			"    @staticmethod\n" +
			"    def static(): Ünïcode.by_class()\n" +
			"# a last comment without a line break",
		// never_called.py is the failure the tool exists for: the method is added, as a
		// grep would confirm, but nothing calls it.
		"never_called.py": `import os


class Buffer:
    def __init__(self, group):
        self.group = group
        # self._setup_device_hca_mapping() is done later
        msg = "call self._setup_device_hca_mapping() first"

        def later():
            self._setup_device_hca_mapping()
        self.hook = self._setup_device_hca_mapping

    def _setup_device_hca_mapping(self):
        if 'DEEP_EP_DEVICE_TO_HCA_MAPPING' in os.environ:
            os.environ['NVSHMEM_HCA_LIST'] = os.environ['DEEP_EP_DEVICE_TO_HCA_MAPPING']
`,
		"called.py": `import os


class Buffer:
    def __init__(self, group):
        self.group = group
        if group is not None:
            self._setup_device_hca_mapping()

    def _setup_device_hca_mapping(self):
        mapping = os.environ.get('DEEP_EP_DEVICE_TO_HCA_MAPPING')
        if mapping:
            os.environ['NVSHMEM_HCA_LIST'] = mapping
`,
	}
	files["crlf.py"] = strings.ReplaceAll(files["nested.py"], "\n", "\r\n")
	files["noeol.py"] = "class A:\n    def f(self):\n        return self.g()"
	files["empty.py"] = ""
	files["only_comment.py"] = "# c"
	files["trailing_blanks.py"] = "class A:\n    def f(self):\n        pass\n\n   "
	files["comment_dedent.py"] = "if x:\n    y = (1,  # in brackets\n         2)\n        # deeper comment\n# outer comment\nclass B: pass\n"
	files["deep.py"] = "class A:\n  class B:\n    class C:\n      def f(self):\n        if 1:\n          if 2:\n            self.deep()\n  def g(self): self.shallow()\n"
	return files
}

// writeCorpus writes files under a new temp dir and returns the paths, sorted.
func writeCorpus(t *testing.T, files map[string]string) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}
