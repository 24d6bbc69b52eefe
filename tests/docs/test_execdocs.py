"""The executed-docs machinery on literal pages: markers, console parsing, output matching."""

from __future__ import annotations

from pathlib import Path

from tests.docs.execdocs import blocks, output_matches, parse_console

PAGE = """# A page

<!-- run save=nrg.toml -->
```toml
[[collectors.procfs]]
```

<!-- skip: needs Docker -->
```sh
docker compose up -d
```

```python
print("unmarked")
```

1. A list item:

   <!-- run numbers-vary host=vm -->
   ```console
   $ nrg-collect list
   procfs  available
   ```
"""


def test_blocks_carry_the_marker_just_before_their_fence(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    got = [(b.lang, b.kind, b.options, b.reason) for b in blocks(page)]
    assert got == [
        ("toml", "run", {"save": "nrg.toml"}, ""),
        ("sh", "skip", {}, "needs Docker"),
        ("python", "", {}, ""),
        ("console", "run", {"numbers-vary": "", "host": "vm"}, ""),
    ]
    console = blocks(page)[3]
    assert parse_console(console.text) == [("nrg-collect list", ["procfs  available"])]


def test_shown_output_matches_with_wildcards_spacing_and_numbers() -> None:
    shown = ["Energy: 151.836 J, mean 30.0 W", "  rapl:dram-0   vm   25.310", "…", "done"]
    real = ["Energy: 7.5 J, mean 29.98 W", "rapl:dram-0 vm 1234.5", "a", "b", "done"]
    assert output_matches(shown, real, numbers_vary=True)
    assert not output_matches(shown, real)  # the numbers differ
    assert not output_matches(shown, [*real, "extra"], numbers_vary=True)
    assert not output_matches(shown, real[:1] + real[2:], numbers_vary=True)
    assert output_matches(['root = "…/powercap"'], ['root = "/tmp/x/powercap"'])
    assert not output_matches(['root = "…/powercap"'], ['root = "/tmp/x/other"'])
    assert output_matches(["…"], [])
    # a unit's prefix follows the value (a longer run on a slower machine)
    assert output_matches(
        ["Energy: 151.836 J, mean 30.0 W"], ["Energy: 1.350 kJ, mean 29.9 W"], numbers_vary=True
    )
    assert not output_matches(["Energy: 151.836 J"], ["Energy: 1.350 kJ"])
    assert not output_matches(["Energy: 151.836 J"], ["Energy: 1.350 kW"], numbers_vary=True)
