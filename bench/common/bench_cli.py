"""What the Python bench drivers (bench/models/bench_finetune.py, bench/gpu/bench_gpt.py,
bench/gpu/bench_host_overhead.py) share for their command lines: a usage error, the integer check
every flag uses, as cli.h's at_least does for the C++ programs, and the one-line exit on a bad
command line."""
import argparse
import sys


class UsageError(Exception):
    pass


def at_least(name, minimum=1):
    """An argparse type: an integer >= minimum, else a UsageError naming the flag."""
    def check(text):
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or v < minimum:
            raise UsageError("%s: '%s' is not an integer >= %d" % (name, text, minimum))
        return v
    return check


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so the driver prints one line."""
    def error(self, message):
        raise UsageError(message)


def parse_or_exit(program, parse, argv):
    """parse(argv), or "PROGRAM: error: WHAT" on stderr and exit status 2."""
    try:
        return parse(argv)
    except UsageError as e:
        print("%s: error: %s" % (program, e), file=sys.stderr)
        sys.exit(2)
