"""Names shared by tools, sessions and agents (toolsrv.registry.names)."""

import pytest

from toolsrv.registry.names import NAME_MAX, check_name, valid_name

GOOD = ["a", "file_read", "k8s", "rg-search", "v1.2", ".hidden", "..x", "A" * NAME_MAX, "_"]
BAD = [("", "bad tool name: empty"),
       (".", "bad tool name '.': reserved"),
       ("..", "bad tool name '..': reserved"),
       ("a" * (NAME_MAX + 1), f"bad tool name: {NAME_MAX + 1} characters, at most {NAME_MAX}"),
       ("a/b", "bad tool name 'a/b': '/' not allowed (use letters, digits, '.', '_' and '-')"),
       ("a b", "bad tool name 'a b': ' ' not allowed"),
       ("tab\t", "bad tool name 'tab\\t': '\\t' not allowed"),
       ("naïve", "bad tool name 'naïve': 'ï' not allowed"),
       ("nul\0", "bad tool name 'nul\\x00': '\\x00' not allowed"),
       ("x\n", "bad tool name 'x\\n': '\\n' not allowed"),
       (3, "bad tool name: must be a string")]


@pytest.mark.parametrize("name", GOOD)
def test_valid(name):
    assert valid_name(name)
    check_name(name, "tool")


@pytest.mark.parametrize("name,message", BAD, ids=[repr(n) for n, _ in BAD])
def test_invalid(name, message):
    assert not valid_name(name)
    with pytest.raises(ValueError) as e:
        check_name(name, "tool")
    assert str(e.value).startswith(message)


def test_message_names_what():
    with pytest.raises(ValueError, match="^bad agent name 'a b'"):
        check_name("a b", "agent")
