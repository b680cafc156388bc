"""bench.layers sorts each perf sample into the layer its call chain says (issue 18)."""

from __future__ import annotations

from bench.layers import _layer

KERNEL = "ffffffff81000000 {} ([kernel.kallsyms])"


def kernel(*symbols: str) -> list[str]:
    return [KERNEL.format(symbol) for symbol in symbols]


def test_a_sync_or_a_file_write_of_the_database_is_disk() -> None:
    assert _layer(kernel("ext4_sync_file", "__x64_sys_fsync", "do_syscall_64")) == "disk"
    assert _layer(kernel("vfs_write", "__x64_sys_pwrite64", "do_syscall_64")) == "disk"
    assert _layer(kernel("fcntl_setlk", "__x64_sys_fcntl", "do_syscall_64")) == "disk"


def test_any_other_system_call_is_network_and_loop() -> None:
    assert _layer(kernel("tcp_sendmsg", "__x64_sys_sendto", "do_syscall_64")) == "net+loop"
    assert _layer(kernel("ep_poll", "__x64_sys_epoll_wait", "do_syscall_64")) == "net+loop"
    # write(2) on a socket (libuv writes that way) is not mistaken for a database write.
    assert _layer(kernel("sock_write_iter", "__x64_sys_write", "do_syscall_64")) == "net+loop"


def test_kernel_work_outside_a_system_call_is_kernel() -> None:
    assert _layer(kernel("handle_softirqs", "irq_exit_rcu", "sysvec_apic_timer_interrupt")) == (
        "kernel"
    )


def test_user_space_is_told_apart_by_its_library() -> None:
    sqlite = "7f00 sqlite3VdbeExec (/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6)"
    module = "7f00 pysqlite_step (/usr/lib/python3.11/lib-dynload/_sqlite3.cpython-311.so)"
    python = "7f00 _PyEval_EvalFrameDefault (/usr/lib/libpython3.11.so.1.0)"
    uvloop = "7f00 __pyx_f_6uvloop_4loop_4Loop__run (/venv/uvloop/loop.cpython-311.so)"
    assert _layer([sqlite, python]) == "sqlite"
    assert _layer([module, python]) == "sqlite"
    assert _layer([python]) == "python"
    assert _layer([uvloop, python]) == "C ext"
