"""``leir-lsp``: start the LEIR language server.

    leir-lsp [--stdio]              speak LSP on standard input/output (default)
    leir-lsp --tcp HOST:PORT        listen for one client on a TCP port
    leir-lsp --log-file PATH        append the server's log to PATH
    leir-lsp --version
    leir-lsp watch DIR [--report PATH] [--target T] [--budget N] [--once]
                                    follow the kernels under DIR in the terminal
                                    (see leir_server.watch)

The protocol machinery (pygls) is imported only once the arguments are
parsed, and nothing here imports TVM or NumPy: ``--version`` and a bad
argument answer at once, and the editor gets its ``initialize`` reply without
waiting for a compiler to load.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import NoReturn, Sequence

PROG = "leir-lsp"


class _OneLineErrorParser(argparse.ArgumentParser):
    """Reports a usage error as one line, not a usage block: an editor shows
    the last line of a server's stderr when the server fails to start."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _host_port(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    host = host.strip("[]")  # [::1]:2087
    if not colon or not host or not port:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be a number, got {port!r}") from None
    if not 1 <= number <= 65535:
        # Port 0 would bind a random port that the client has no way to learn.
        raise argparse.ArgumentTypeError(f"port must be between 1 and 65535, got {number}")
    return host, number


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PROG)
    except PackageNotFoundError:
        return "0+unknown"


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineErrorParser(prog=PROG, description="The LEIR language server.")
    transport = parser.add_mutually_exclusive_group()
    # Editors' LSP clients pass --stdio explicitly (vscode-languageclient does).
    transport.add_argument("--stdio", action="store_true", help="use standard input/output (default)")
    transport.add_argument(
        "--tcp", metavar="HOST:PORT", type=_host_port, help="listen on HOST:PORT for one client"
    )
    parser.add_argument("--log-file", metavar="PATH", help="append the server's log to PATH")
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    return parser


def _configure_logging(log_file: str | None) -> None:
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    if log_file is None:
        # Standard output carries the protocol; warnings go to stderr.
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=fmt)
        return
    try:
        handler = logging.FileHandler(log_file, encoding="utf-8")
    except OSError as e:
        _fail(f"cannot open log file {log_file}: {e.strerror or e}")
    handler.setFormatter(logging.Formatter(fmt))
    # Errors also go to stderr, which the editor shows: why the server
    # exited (an input it cannot read) must reach the user without the file.
    errors = logging.StreamHandler(sys.stderr)
    errors.setLevel(logging.ERROR)
    errors.setFormatter(logging.Formatter(fmt))
    logging.basicConfig(handlers=[handler, errors], level=logging.INFO)


def _fail(message: str) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(1)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["watch"]:
        from leir_server.watch import main as watch

        return watch(argv[1:])
    args = _parser().parse_args(argv)
    _configure_logging(args.log_file)

    from leir_server.server import build_server

    server = build_server()
    # The exit status: 0 after shutdown and exit, 1 for an exit without
    # shutdown, 2 for an input that is not LSP any more (leir_server.server).
    if args.tcp is None:
        return server.start_io()
    host, port = args.tcp
    try:
        return server.start_tcp(host, port)
    except OSError as e:
        _fail(f"cannot listen on {host}:{port}: {e.strerror or e}")


if __name__ == "__main__":
    sys.exit(main())
