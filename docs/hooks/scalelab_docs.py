"""MkDocs hook: the pages that are generated from the code at build time.

- ``<!-- scalelab:cli-reference -->`` on a page becomes the command reference, written from
  the argparse parsers that ``scalelab.cli.build_parser`` builds (every subcommand, every
  option, its default, choices and help), so an option added to a parser appears here.
- ``<!-- scalelab:hardware-catalog -->`` becomes the hardware catalog, read from
  ``src/scalelab/hardware/catalog.toml`` through ``scalelab.hardware.catalog()``.
- MathJax 3 (``tex-svg.js`` from the ``django-static-mathjax`` package, installed with the
  ``docs`` extra) is copied into the built site under ``assets/mathjax/``, so formulas
  render with no network, from a server or from the files.

The functions without an ``on_`` prefix are plain Python, used by ``tests/test_docs.py``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

CLI_MARKER = "<!-- scalelab:cli-reference -->"
CATALOG_MARKER = "<!-- scalelab:hardware-catalog -->"
MATHJAX_DEST = "assets/mathjax"


# ---------------------------------------------------------------- command reference


def walk_parsers(parser: argparse.ArgumentParser, prefix: str = "scalelab", summary: str = ""):
    """(command line, parser, its one-line help) for the parser and every subcommand below
    it, depth first, in the order the parsers list them."""
    yield prefix, parser, summary
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield from walk_parsers(sub, f"{prefix} {name}", helps.get(name, ""))


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string (``--out``, ``-h``) and positional name of one parser."""
    out: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        out.extend(action.option_strings or [action.metavar or action.dest])
    return out


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help is argparse.SUPPRESS:
        return ""
    try:
        return parser._get_formatter()._expand_help(action)
    except (KeyError, TypeError, ValueError):
        return action.help


def _default(action: argparse.Action) -> str:
    d = action.default
    if d in (None, argparse.SUPPRESS) or d == [] or isinstance(d, bool) or \
            isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
        return ""
    return f"`{d}`"


def _takes(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return " \\| ".join(f"`{c}`" for c in action.choices)
    # Python-Markdown keeps a pipe inside a code span in its cell: no escape there
    return f"`{' '.join(str(action.metavar or action.dest.upper()).split())}`"


def parser_markdown(command: str, parser: argparse.ArgumentParser, summary: str) -> str:
    """One command's section: usage, description, a table of its arguments, its examples."""
    anchor = re.sub(r"[^a-z0-9]+", "-", command.lower()).strip("-")
    lines = [f"## `{command}` {{ #{anchor} }}", ""]
    if summary and summary != parser.description:
        lines += [_cell(summary).rstrip(".") + ".", ""]
    if parser.description:
        lines += [_cell(parser.description), ""]
    # argparse aligns the continuation lines under "usage: PROG": drop the prefix's width
    first, *rest = parser.format_usage().strip().removeprefix("usage: ").splitlines()
    usage = "\n".join([first, *(line.removeprefix(" " * len("usage: ")) for line in rest)])
    lines += ["```text", usage, "```", ""]
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            names = ", ".join(f"[`{n}`](#{anchor}-{n})" for n in action.choices)
            rows.append(f"| `{action.metavar or 'ACTION'}` | {names} | | subcommand |")
            continue
        flags = ", ".join(f"`{s}`" for s in action.option_strings) or \
            f"`{action.metavar or action.dest}`"
        rows.append(f"| {flags} | {_takes(action) if action.option_strings else ''} "
                    f"| {_default(action)} | {_cell(_help(parser, action))} |")
    if rows:
        lines += ["| argument | takes | default | meaning |", "|---|---|---|---|", *rows, ""]
    if parser.epilog:
        lines += ["```text", parser.epilog.strip("\n"), "```", ""]
    return "\n".join(lines)


def cli_reference_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole command reference, one section per command line."""
    if parser is None:
        from scalelab.cli import build_parser

        parser = build_parser()
    return "\n".join(parser_markdown(c, p, s) for c, p, s in walk_parsers(parser))


def missing_options(reference: str, parser: argparse.ArgumentParser) -> list[str]:
    """``'scalelab plan --out'`` for every option the reference's section of its command does
    not show (each section runs from its heading to the next)."""
    sections = dict(re.findall(r"^## `([^`]+)`[^\n]*\n(.*?)(?=^## `|\Z)", reference,
                               re.M | re.S))
    missing = []
    for command, p, _ in walk_parsers(parser):
        body = sections.get(command)
        for opt in option_strings(p):
            if body is None or f"`{opt}`" not in body:
                missing.append(f"{command} {opt}")
    return missing


# ---------------------------------------------------------------- hardware catalog


def _num(value, fmt="{:g}") -> str:
    return "" if value is None else fmt.format(value)


def _source(text: str | None) -> str:
    if not text:
        return ""
    return _cell(re.sub(r"(https?://[^\s),;]+)", r"<\1>", text))


def catalog_markdown() -> str:
    """Devices, intra-node links and networks of the packaged catalog, each with its source.
    The peak columns are the device type's ``*_tflops`` fields and the sources its
    ``source`` and ``*_source`` fields, so a precision or a source added there shows here."""
    from dataclasses import fields

    from scalelab import hardware

    cat = hardware.catalog()
    names = [f.name for f in fields(hardware.Device)]
    peaks = [n for n in names if n.endswith("_tflops")]
    sources = [n for n in names if n.endswith("_source")]
    heads = " | ".join(p.removesuffix("_tflops").upper() for p in peaks)
    out = ["## Devices", "",
           "Dense peak TFLOPS per precision (blank: no such path, never guessed), memory, "
           "memory bandwidth, the node they usually come in.", "",
           f"| name | generation | {heads} | memory GiB | memory GB/s | intra-node link "
           "| platform |",
           "|---|---|" + "---|" * len(peaks) + "---|---|---|---|"]
    for name, d in cat.devices.items():
        mem = None if d.memory_bytes is None else d.memory_bytes / 2**30
        bw = None if d.memory_bandwidth_Bps is None else d.memory_bandwidth_Bps / 1e9
        tflops = " | ".join(_num(getattr(d, p)) for p in peaks)
        out.append(
            f"| `{name}` | {d.generation or ''} | {tflops} | {_num(mem, '{:.0f}')} "
            f"| {_num(bw, '{:.0f}')} | {d.intra_node or ''} | {_cell(d.platform or '')} |")
    out += ["", "### Device names and sources", ""]
    for name, d in cat.devices.items():
        also = f" (also {_cell(', '.join(d.aliases))})" if d.aliases else ""
        out.append(f"- **{name}**{also}: {_source(d.source)}")
        for field in sources:
            text = getattr(d, field)
            if text:
                out.append(f"    - {field.removesuffix('_source').replace('_', ' ')}: "
                           f"{_source(text)}")
    out += ["", "## Links inside a node", "", "Per-direction bandwidth.", "",
            "| name | link | GB/s per direction | source |", "|---|---|---|---|"]
    for name, link in cat.links.items():
        out.append(f"| `{name}` | {_cell(link.title)} | {link.bandwidth_Bps / 1e9:g} "
                   f"| {_source(link.source)} |")
    out += ["", "## Networks", "",
            "Nominal line rate and the per-direction payload rate after encoding and framing.",
            "", "| name | aliases | Gb/s | payload Gb/s | source |", "|---|---|---|---|---|"]
    for name, n in cat.networks.items():
        out.append(f"| `{name}` | {_cell(', '.join(n.aliases))} | {n.gbps:g} "
                   f"| {n.payload_gbps:g} | {_source(n.source)} |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- the model page


def theory_functions() -> dict[str, list[str]]:
    """{module: [public function names]} of ``scalelab.theory``: a function with a formula is
    a public function (no leading underscore) defined in a ``scalelab.theory.*`` module whose
    docstring is not empty (the theory package holds formulas only, each derived in its
    docstring)."""
    import importlib
    import inspect
    import pkgutil

    import scalelab.theory as theory

    out: dict[str, list[str]] = {}
    for info in sorted(pkgutil.iter_modules(theory.__path__), key=lambda m: m.name):
        name = f"scalelab.theory.{info.name}"
        module = importlib.import_module(name)
        fns = [n for n, f in vars(module).items()
               if inspect.isfunction(f) and f.__module__ == name and not n.startswith("_")
               and (f.__doc__ or "").strip()]
        if fns:
            out[name] = sorted(fns)
    return out


def documented_modules(page: str) -> dict[str, str]:
    """{module: its options block} for every ``::: scalelab.theory.X`` line of a page."""
    found = {}
    for m in re.finditer(r"^::: (scalelab\.theory\.\w+)[ \t]*\n((?:[ \t]+\S.*\n?)*)", page,
                         re.M):
        found[m.group(1)] = m.group(2)
    return found


def uncovered_theory(page: str, functions: dict[str, list[str]]) -> list[str]:
    """``'scalelab.theory.X.f'`` for every function with a formula that the page's
    ``:::`` blocks do not render: its module has no block, or the block lists ``members:``
    without it."""
    blocks = documented_modules(page)
    missing = []
    for module, names in functions.items():
        options = blocks.get(module)
        listed = re.search(r"members:\s*\[([^\]]*)\]", options or "")
        for name in names:
            if options is None or (listed and name not in re.findall(r"\w+", listed.group(1))):
                missing.append(f"{module}.{name}")
    return missing


# ---------------------------------------------------------------- MkDocs events


def _mathjax_root() -> Path | None:
    try:
        import mathjax  # django-static-mathjax
    except ImportError:
        return None
    root = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    return root if (root / "tex-svg.js").is_file() else None


def on_config(config, **kwargs):
    if _mathjax_root() is None:
        from mkdocs.exceptions import PluginError

        raise PluginError("MathJax is missing: pip install -e '.[docs]' (django-static-mathjax)")
    return config


def on_files(files, config, **kwargs):
    """Add MathJax's tex-svg.js to the site. Its SVG output draws every glyph as a path, so
    it needs no font files (web fonts are refused to pages opened from file://)."""
    from mkdocs.structure.files import File

    path = _mathjax_root() / "tex-svg.js"
    files.append(File.generated(config, f"{MATHJAX_DEST}/tex-svg.js", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files, **kwargs):
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference_markdown())
    if CATALOG_MARKER in markdown:
        markdown = markdown.replace(CATALOG_MARKER, catalog_markdown())
    return markdown


_RST_ROLE = re.compile(r":(?:func|mod|data|class|meth|attr):(?=<code>)")


def on_page_content(html, page, config, files, **kwargs):
    """Docstrings name functions as reStructuredText roles (``:func:`x```), which Markdown
    leaves as text before the code: keep the code, drop the role."""
    return _RST_ROLE.sub("", html)

