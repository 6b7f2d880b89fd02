"""Print this machine's Debian mirror and security mirror for bookworm (one per line; the
second line may be empty), read from its apt sources: deb822 ``*.sources`` files and one-line
``*.list`` files. deploy/podman/build-images.sh builds its root file system from them."""

import glob
import sys


def entries():
    """(uri, suites) for every enabled ``deb`` source on this machine."""
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as f:
            for para in f.read().split("\n\n"):
                fields = {}
                for line in para.splitlines():
                    if line.startswith("#") or ":" not in line or line[0].isspace():
                        continue
                    key, value = line.split(":", 1)
                    fields[key.strip().lower()] = value.split()
                if "deb" in fields.get("types", []) and fields.get("enabled", ["yes"]) != ["no"]:
                    for uri in fields.get("uris", []):
                        yield uri, fields.get("suites", [])
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split("#", 1)[0].split()
            if words and words[0] == "deb":
                words = [w for w in words[1:] if not w.startswith("[")]
                if len(words) >= 2:
                    yield words[0], [words[1]]


def main(suite: str) -> int:
    found = list(entries())
    main_uri = next((uri for uri, suites in found if suite in suites), "")
    security = next((uri for uri, suites in found if f"{suite}-security" in suites), "")
    if not main_uri:
        print(f"no apt source for Debian {suite} on this machine", file=sys.stderr)
        return 1
    print(main_uri.rstrip("/"))
    print(security.rstrip("/"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bookworm"))
