"""The documentation site: the generated pages, the model page's coverage, the built site.

Conventions these tests hold (docs/hooks/scalelab_docs.py has the code they call):

- **Command-line options.** The command reference (docs/reference/cli.md) is generated when
  the site is built, from the parsers ``scalelab.cli.build_parser()`` builds, so an option
  added to any subcommand appears there by itself. The tests fail when an option string of
  any (sub)command is missing from its command's section.
- **Theory functions.** A *theory function with a formula* is a public function (no leading
  underscore) defined in a module of ``scalelab.theory`` whose docstring is not empty (that
  package holds formulas only, each derived in its docstring). Every one must be rendered
  on the model page. A new module ``scalelab.theory.X`` is covered by one line in
  docs/model.md, ``::: scalelab.theory.X``, under a heading of its own (its formulas as
  math above it); a block that lists ``members: [...]`` must list every such function. The
  tests fail until then.
- **The built site.** It is built once per session (``mkdocs build --strict``, so a broken
  link, reference or page fails) into a temporary folder; those tests are marked slow. The
  browser test renders the home page and the model page in headless Chromium, offline, and
  checks that MathJax drew the formulas.
"""

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _hooks():
    spec = importlib.util.spec_from_file_location(
        "scalelab_docs", ROOT / "docs" / "hooks" / "scalelab_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


docs = _hooks()


@pytest.fixture(scope="module")
def parser():
    from scalelab.cli import build_parser

    return build_parser()


def _subparser(parser, *names):
    for name in names:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def test_cli_reference_lists_every_option_of_every_command(parser):
    reference = docs.cli_reference_markdown(parser)
    commands = [c for c, _, _ in docs.walk_parsers(parser)]
    assert {"scalelab plan", "scalelab run", "scalelab hardware show"} <= set(commands)
    assert docs.missing_options(reference, parser) == []
    for command in commands:
        assert f"## `{command}`" in reference


def test_cli_reference_check_finds_a_missing_option(parser):
    reference = docs.cli_reference_markdown(parser)
    _subparser(parser, "plan").add_argument("--not-in-the-reference", help="added after")
    try:
        assert docs.missing_options(reference, parser) == [
            "scalelab plan --not-in-the-reference"]
    finally:
        plan = _subparser(parser, "plan")
        action = plan._option_string_actions.pop("--not-in-the-reference")
        plan._actions.remove(action)
    # a row removed from one command's section is missed there, even if another has it
    section = reference.index("## `scalelab run`")
    row = reference.index("| `--out`", section)
    cut = reference[:row] + reference[reference.index("\n", row) + 1:]
    assert docs.missing_options(cut, parser) == ["scalelab run --out"]


def test_cli_reference_page_is_generated():
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert docs.CLI_MARKER in page


def test_every_theory_function_is_on_the_model_page():
    functions = docs.theory_functions()
    assert "scalelab.theory.amdahl" in functions
    assert "strong_speedup" in functions["scalelab.theory.amdahl"]
    assert all(not n.startswith("_") for names in functions.values() for n in names)
    page = (ROOT / "docs" / "model.md").read_text()
    missing = docs.uncovered_theory(page, functions)
    assert missing == [], (
        f"add '::: MODULE' to docs/model.md for: {', '.join(sorted(missing))}")


def test_model_page_check_finds_a_missing_module_or_member():
    functions = {"scalelab.theory.amdahl": ["max_speedup", "strong_speedup"]}
    assert docs.uncovered_theory("::: scalelab.theory.amdahl\n", functions) == []
    assert docs.uncovered_theory("# nothing\n", functions) == [
        "scalelab.theory.amdahl.max_speedup", "scalelab.theory.amdahl.strong_speedup"]
    listed = "::: scalelab.theory.amdahl\n    options:\n      members: [strong_speedup]\n"
    assert docs.uncovered_theory(listed, functions) == ["scalelab.theory.amdahl.max_speedup"]
    page = (ROOT / "docs" / "model.md").read_text()
    cut = page.replace("::: scalelab.theory.sizing\n", "")
    assert "scalelab.theory.sizing.ps_servers_needed" in docs.uncovered_theory(
        cut, docs.theory_functions())


def test_hardware_catalog_page_has_every_entry_and_source():
    from scalelab import hardware

    text = docs.catalog_markdown()
    cat = hardware.catalog()
    for name in cat.devices:
        assert f"| `{name}` |" in text
        assert f"**{name}**" in text
    for name in (*cat.links, *cat.networks):
        assert f"| `{name}` |" in text
    assert "| name | generation | FP32 | TF32 | BF16 | FP16 | FP8 | memory GiB |" in text
    assert "| `A100-SXM-80GB` | ampere | 19.5 | 156 | 312 | 312 |  | 80 | 2039 | nvlink3 " in text
    h200 = cat.devices["H200"]
    row = next(line for line in text.splitlines() if line.startswith("| `H200` |"))
    assert f"| {h200.fp8_tflops:g} |" in row and h200.fp8_source in text.replace("\\|", "|")
    assert "**A100-SXM-80GB** (also A100, A100-SXM4-80GB, NVIDIA A100-SXM4-80GB): NVIDIA" in text
    assert docs.CATALOG_MARKER in (ROOT / "docs" / "hardware-catalog.md").read_text()


# ---------------------------------------------------------------- the built site


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.mark.slow
def test_built_model_page_renders_every_theory_function(site):
    html = (site / "model" / "index.html").read_text()
    for module, names in docs.theory_functions().items():
        for name in names:
            assert f'id="{module}.{name}"' in html, f"{module}.{name} is not on the model page"
    assert html.count('class="arithmatex"') >= 40
    assert ":func:" not in html


@pytest.mark.slow
def test_built_site_has_the_references_and_loads_nothing_from_outside(site, parser):
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command, p, _ in docs.walk_parsers(parser):
        for opt in docs.option_strings(p):
            assert f"<code>{opt}</code>" in cli, f"{command} {opt}"
    assert (site / "assets" / "mathjax" / "tex-svg.js").stat().st_size > 1_000_000
    for page in site.rglob("*.html"):
        text = page.read_text()
        outside = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(https?:)?//[^"]*"', text)
        assert outside == [], f"{page.relative_to(site)} loads {outside}"


def _chromium(tmp_path, *args):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=10000"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True,
                          timeout=120).stdout


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium")
def test_site_renders_formulas_as_math_in_chromium(site, tmp_path):
    """The pages are opened from the files (file://), as offline as it gets: MathJax must
    come from the site itself and draw every formula, with no TeX error."""
    for page, least in (("index.html", 1), ("model/index.html", 40)):
        dom = _chromium(tmp_path, "--dump-dom", (site / page).resolve().as_uri())
        assert "<h1" in dom and "scalelab" in dom
        typeset = re.findall(r'<mjx-container[^>]*jax="SVG"', dom)
        assert len(typeset) >= least, f"{page}: {len(typeset)} formulas typeset"
        assert len(typeset) >= dom.count('class="arithmatex"'), page
        assert "data-mjx-error=" not in dom and '<g data-mml-node="merror"' not in dom, page
    shot = tmp_path / "model.png"
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,1600",
              (site / "model" / "index.html").resolve().as_uri())
    assert shot.exists() and shot.stat().st_size > 20_000
