# test_reference.py: docs/reference/python.md documents the module as it is: a heading for
# every public name and method, each signature the code's, and a type stub for each.
import inspect
import os
import re

import troupe
from conftest import SOURCE

PAGE = os.path.join(SOURCE, "docs", "reference", "python.md")
HEADING = re.compile(r"^### `([A-Za-z_.]+)(\(.*\))?`$", re.M)


def documented():
    return {name: signature for name, signature in HEADING.findall(open(PAGE).read())}


def resolve(name):
    owner, value = None, troupe
    for part in name.split("."):
        owner, value = value, getattr(value, part)
    return owner, value


def public_names():
    names = {n for n in troupe.__all__ if n != "data"}
    names |= {f"data.{n}" for n in troupe.data.__all__}
    for cls in (troupe.Config, troupe.Run):
        names |= {f"{cls.__name__}.{n}" for n in vars(cls) if not n.startswith("_")}
    names |= {"Config.__setitem__", "Config.__getitem__"}
    return names


def test_every_public_name_has_a_heading_and_every_heading_a_name():
    headings = documented()
    assert sorted(public_names() - set(headings)) == []
    for name in headings:
        resolve(name)  # raises AttributeError for a heading of nothing


def test_each_documented_signature_is_the_codes():
    for name, written in documented().items():
        if not written:
            continue
        owner, value = resolve(name)
        signature = inspect.signature(value)
        if inspect.isclass(owner) and inspect.isfunction(inspect.getattr_static(owner, name.split(".")[-1])):
            parameters = list(signature.parameters.values())[1:]  # an instance method's self
            signature = signature.replace(parameters=parameters)
        assert written == str(signature), name


def test_every_public_name_has_a_type_stub_and_a_docstring():
    stubs = open(os.path.join(os.path.dirname(troupe.__file__), "__init__.pyi")).read()
    data_stubs = open(os.path.join(os.path.dirname(troupe.__file__), "data.pyi")).read()
    for name in public_names():
        last = name.split(".")[-1]
        assert re.search(rf"\b(def|class) {re.escape(last)}\b", data_stubs if name.startswith("data.") else stubs), name
        _, value = resolve(name)
        if callable(value) and not name.startswith("Config.__"):
            assert (value.__doc__ or "").strip(), f"{name} has no docstring"


def test_the_readmes_from_python_example_runs_as_written(monkeypatch):
    readme = open(os.path.join(SOURCE, "README.md")).read()
    section = readme[readme.index("## From Python"):]
    code = section[section.index("```python") + len("```python"):section.index("```\n", section.index("```python") + 9)]
    monkeypatch.chdir(SOURCE)
    printed = []
    namespace = {"print": printed.append}
    exec(compile(code, "README.md (From Python)", "exec"), namespace)
    assert printed and printed[-1]["event"] == "done" and printed[-1]["test_accuracy"] > 0.9
    assert namespace["weights"]["0.weight"].shape == (256, 64)
