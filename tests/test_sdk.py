"""The installed SDK's Iggy line, and SDK errors read by their Iggy code on both lines."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from iggy_spark import sdk
from iggy_spark.errors import SendError

pytestmark = pytest.mark.iggy_line


@pytest.mark.parametrize(("version", "line"), [
    ("0.9.0", sdk.SDK_0_9),
    ("0.9.0.post1", sdk.SDK_0_9),
    ("0.9.1.dev5", sdk.SDK_0_10),
    ("0.10.0", sdk.SDK_0_10),
    ("0.10.3", sdk.SDK_0_10),
    ("0.9.1.dev4", None),  # not checked against protocol 0.12.0
    ("0.11.0", None),
    ("0.8.0", None),
    ("1.0.0rc1", None),
])
def test_each_sdk_version_speaks_one_line(version: str, line: sdk.SdkLine | None) -> None:
    assert sdk.line_of(version) is line


def test_the_lines_protocols_and_commands() -> None:
    assert [sdk.protocol_text(line.protocol) for line in sdk.LINES] == ["0.11.0", "0.12.0"]
    assert sdk.SDK_0_10.speaks(sdk.SDK_0_10.protocol) and not sdk.SDK_0_10.speaks(
        sdk.SDK_0_9.protocol)
    assert sdk.SDK_0_9.install == 'pip install "iggy-spark[iggy]"'
    assert sdk.SDK_0_10.install == 'pip install "iggy-spark[iggy-0-10]"'
    version, line = sdk.installed()
    assert line is sdk.line_of(version) is not None


ROOT = Path(__file__).resolve().parents[1]
RELEASES = ["0.8.0", "0.9.0", "0.9.0.post1", "0.9.1.dev1", "0.9.1.dev4", "0.9.1.dev5",
            "0.9.1", "0.10.0", "0.11.0"]


@pytest.mark.parametrize("line", sdk.LINES, ids=lambda line: line.server)
def test_each_lines_install_command_installs_an_sdk_of_that_line_only(
    line: sdk.SdkLine,
) -> None:
    """The extra a line's install command names admits, of the SDK's releases (pre-releases
    too, as with ``pip install --pre``), those of that line and no other."""
    extra = re.fullmatch(r'pip install "iggy-spark\[([a-z0-9-]+)\]"', line.install)
    assert extra is not None
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    (pin,) = (r for r in map(Requirement, extras[extra[1]]) if r.name == "apache-iggy")
    admitted = [v for v in RELEASES if pin.specifier.contains(v, prereleases=True)]
    assert admitted and all(sdk.line_of(v) is line for v in admitted), admitted
    assert [v for v in RELEASES if sdk.line_of(v) is line and "dev" in v] == [
        v for v in admitted if "dev" in v]


def test_the_suite_tests_the_010_line_with_the_sdk_its_extra_pins() -> None:
    pinned = re.search(r"^IGGY_0_10_SDK=(\S+)$", (ROOT / "run").read_text(), re.MULTILINE)
    assert pinned is not None and sdk.line_of(pinned[1]) is sdk.SDK_0_10
    assert f'"apache-iggy=={pinned[1]}"' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize(("text", "code"), [
    ("Disconnected", 8),
    ("Connection closed", 206),
    ("Cannot sed messages due to client disconnection", 4050),
    ("Stream with name: orders already exists.", 1012),
    ("Topic with name: t for stream with ID: 1 already exists.", 2013),
    ("Topic with name: a\nb for stream with ID: 1 already exists.", 2013),
    ("Incompatible binary protocol version: client 0.11.0, server accepts [0.12.0, 0.12.0]",
     14003),
    ("Stream with ID: Disconnected was not found.", None),
    ("disconnected", None),
    ("Invalid credentials", None),
])
def test_the_09_sdks_errors_are_read_by_their_whole_text(text: str, code: int | None) -> None:
    assert sdk.error_code(RuntimeError(text)) == code


def test_only_the_sdks_own_errors_have_a_code() -> None:
    class Other(RuntimeError):
        pass

    assert sdk.error_code(Other("Disconnected")) is None
    assert sdk.error_code(ConnectionError("Disconnected")) is None
    assert sdk.error_code(RuntimeError("Disconnected", 1)) is None
    assert sdk.error_code(SendError("s", "t", "Disconnected")) is None
    assert sdk.is_sdk_error(RuntimeError("anything"))
    assert not sdk.is_sdk_error(Other("anything")) and not sdk.is_sdk_error(ValueError("x"))
