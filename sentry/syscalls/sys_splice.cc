// Moving data between descriptors without a trip through application
// memory: sendfile(2), splice(2), tee(2), vmsplice(2), copy_file_range(2).
//
// Linux moves page references; the Sentry copies through a bounded buffer
// of its own (kChunk), which is invisible to the application except in
// speed. What is kept from Linux: which pairs of files each call accepts
// and its errnos (fs/splice.c, fs/read_write.c), partial transfers, the
// file offsets used and updated, O_NONBLOCK and SPLICE_F_NONBLOCK, SIGPIPE
// on a pipe without readers. Data taken from a pipe is consumed only once
// the other side accepted it (peek, write, discard), so a short or failed
// write loses nothing; a concurrent reader of the same pipe may see those
// bytes in the meantime, which Linux's pipe lock would prevent.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "sentry/fs/pipe.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

constexpr uint64_t kChunk = 64 * 1024;
constexpr uint64_t kMaxRw = 0x7ffff000;  // MAX_RW_COUNT
constexpr int kIovMax = 1024;

// From <linux/fs.h>; not in every libc's headers.
constexpr unsigned kSpliceMove = 1;
constexpr unsigned kSpliceNonblock = 2;
constexpr unsigned kSpliceMore = 4;
constexpr unsigned kSpliceGift = 8;
constexpr unsigned kSpliceAll =
    kSpliceMove | kSpliceNonblock | kSpliceMore | kSpliceGift;

fs::PipeEnd* AsPipe(fs::File& f) { return fs::AsPipeEnd(f); }

bool Readable(fs::File& f) {
  int acc = f.StatusFlags() & O_ACCMODE;
  return acc == O_RDONLY || acc == O_RDWR;
}
bool Writable(fs::File& f) {
  int acc = f.StatusFlags() & O_ACCMODE;
  return acc == O_WRONLY || acc == O_RDWR;
}
bool Nonblocking(fs::File& f) { return (f.StatusFlags() & O_NONBLOCK) != 0; }

// The two files of splice, tee, sendfile and copy_file_range: -EBADF
// unless `in` is open for reading and `out` for writing.
int64_t InOutFiles(Task& t, uint64_t in_fd, uint64_t out_fd,
                   std::shared_ptr<fs::File>* in,
                   std::shared_ptr<fs::File>* out) {
  *in = FileOrNull(t, in_fd);
  *out = FileOrNull(t, out_fd);
  if (*in == nullptr || *out == nullptr) return -EBADF;
  if (!Readable(**in) || !Writable(**out)) return -EBADF;
  return 0;
}

uint32_t FileType(fs::File& f) {
  auto inode = f.inode();
  return inode != nullptr ? inode->Type() : 0;
}

int64_t PipeError(Task& t, int64_t r) {
  if (r == -EPIPE) t.SendSignal(SIGPIPE, t.group().tgid());
  return r;
}

// An offset argument: *use is false for a null pointer (the file's own
// position is used); -EFAULT, -EINVAL for a negative offset.
int64_t ReadOffset(Task& t, uint64_t addr, bool* use, int64_t* off) {
  *use = addr != 0;
  if (!*use) return 0;
  RETURN_IF_ERRNO(CopyInObj(t, addr, off));
  return *off < 0 ? -EINVAL : 0;
}

int64_t WriteOffset(Task& t, uint64_t addr, int64_t off) {
  return CopyOutObj(t, addr, off);
}

// Moves up to `len` bytes from `src` (at *off, advanced, or at its own
// position when off is null) into the pipe `dst`. Stops at a short read,
// once the pipe is full after some bytes, or at `len`.
int64_t FileToPipe(Task& t, fs::File& src, int64_t* off, fs::Pipe& dst,
                   uint64_t len, bool nonblock) {
  std::vector<uint8_t> buf(std::min(len, kChunk));
  uint64_t done = 0;
  while (done < len) {
    int64_t room = dst.WaitWritable(nonblock || done > 0, t.io());
    if (room == -EAGAIN && done > 0) break;
    if (room < 0) return done > 0 ? done : PipeError(t, room);
    uint64_t want = std::min({len - done, static_cast<uint64_t>(room), kChunk});
    // A socket source honours SPLICE_F_NONBLOCK too (MSG_DONTWAIT).
    if (nonblock && FileType(src) != S_IFREG &&
        (src.Readiness(POLLIN) & (POLLIN | POLLHUP | POLLERR)) == 0) {
      return done > 0 ? done : -EAGAIN;
    }
    int64_t r = src.Read(buf.data(), want, off != nullptr ? *off : -1, t.io());
    if (r < 0) return done > 0 ? done : r;
    if (r == 0) break;
    int64_t w = dst.Write(buf.data(), r, /*nonblock=*/true, t.io());
    // The room was there a moment ago; another writer may have taken it.
    if (w < 0) return done > 0 ? done : PipeError(t, w);
    if (off != nullptr) *off += w;
    done += w;
    if (w < r || static_cast<uint64_t>(r) < want) break;
  }
  return done;
}

// Moves up to `len` bytes from the pipe `src` into `dst` (at *off,
// advanced, or at its own position). Returns once something was moved and
// the pipe is empty, 0 at EOF.
int64_t PipeToFile(Task& t, fs::Pipe& src, fs::File& dst, int64_t* off,
                   uint64_t len, bool nonblock) {
  std::vector<uint8_t> buf(std::min(len, kChunk));
  uint64_t done = 0;
  while (done < len) {
    int64_t avail = src.WaitReadable(nonblock || done > 0, t.io());
    if (avail == -EAGAIN && done > 0) break;
    if (avail < 0) return done > 0 ? done : avail;
    if (avail == 0) break;  // EOF
    // A socket destination honours SPLICE_F_NONBLOCK too.
    if (nonblock && FileType(dst) != S_IFREG &&
        (dst.Readiness(POLLOUT) & (POLLOUT | POLLHUP | POLLERR)) == 0) {
      return done > 0 ? done : -EAGAIN;
    }
    uint64_t n = src.Peek(buf.data(), std::min(len - done, kChunk));
    int64_t w = dst.Write(buf.data(), n, off != nullptr ? *off : -1, t.io());
    if (w < 0) return done > 0 ? done : PipeError(t, w);
    src.Discard(w);
    if (off != nullptr) *off += w;
    done += w;
    if (static_cast<uint64_t>(w) < n) break;
  }
  return done;
}

// Pipe to pipe: the same, with the destination's nonblocking mode.
int64_t PipeToPipe(Task& t, fs::Pipe& src, fs::Pipe& dst, uint64_t len,
                   bool nonblock, bool consume) {
  std::vector<uint8_t> buf(std::min(len, kChunk));
  uint64_t done = 0;
  // tee copies what is buffered at the start without consuming it: its
  // progress is an offset into the pipe's contents.
  while (done < len) {
    int64_t avail = src.WaitReadable(nonblock || done > 0, t.io());
    if (avail == -EAGAIN && done > 0) break;
    if (avail < 0) return done > 0 ? done : avail;
    if (avail == 0) break;
    if (!consume && static_cast<uint64_t>(avail) <= done) break;
    int64_t room = dst.WaitWritable(nonblock || done > 0, t.io());
    if (room == -EAGAIN && done > 0) break;
    if (room < 0) return done > 0 ? done : PipeError(t, room);
    uint64_t skip = consume ? 0 : done;
    uint64_t want = std::min({len - done, static_cast<uint64_t>(room), kChunk});
    std::vector<uint8_t> tmp(skip + want);
    uint64_t n = src.Peek(tmp.data(), skip + want);
    if (n <= skip) break;
    n -= skip;
    std::copy(tmp.begin() + skip, tmp.begin() + skip + n, buf.begin());
    int64_t w = dst.Write(buf.data(), n, /*nonblock=*/true, t.io());
    if (w < 0) return done > 0 ? done : PipeError(t, w);
    if (consume) src.Discard(w);
    done += w;
    if (static_cast<uint64_t>(w) < n) break;
  }
  return done;
}

int64_t SysSplice(Task& t, const SyscallArgs& a) {
  uint64_t len = std::min<uint64_t>(a.a[4], kMaxRw);
  unsigned flags = static_cast<unsigned>(a.a[5]);
  if (flags & ~kSpliceAll) return -EINVAL;
  std::shared_ptr<fs::File> in, out;
  RETURN_IF_ERRNO(InOutFiles(t, a.a[0], a.a[2], &in, &out));
  fs::PipeEnd* ipipe = AsPipe(*in);
  fs::PipeEnd* opipe = AsPipe(*out);
  bool nonblock = (flags & kSpliceNonblock) != 0;

  if (ipipe != nullptr && opipe != nullptr) {
    if (a.a[1] != 0 || a.a[3] != 0) return -ESPIPE;
    if (&ipipe->pipe() == &opipe->pipe()) return -EINVAL;
    if (len == 0) return 0;
    nonblock |= Nonblocking(*in) || Nonblocking(*out);
    return PipeToPipe(t, ipipe->pipe(), opipe->pipe(), len, nonblock,
                      /*consume=*/true);
  }
  if (ipipe != nullptr) {
    if (a.a[1] != 0) return -ESPIPE;
    if (out->StatusFlags() & O_APPEND) return -EINVAL;
    bool use_off;
    int64_t off = 0;
    // An offset needs a file with positions (FMODE_PWRITE).
    if (a.a[3] != 0 && out->Seek(0, SEEK_CUR) < 0) return -EINVAL;
    RETURN_IF_ERRNO(ReadOffset(t, a.a[3], &use_off, &off));
    if (len == 0) return 0;
    nonblock |= Nonblocking(*in);
    int64_t r = PipeToFile(t, ipipe->pipe(), *out, use_off ? &off : nullptr,
                           len, nonblock);
    if (r > 0 && use_off && WriteOffset(t, a.a[3], off) < 0) return -EFAULT;
    return r;
  }
  if (opipe != nullptr) {
    if (a.a[3] != 0) return -ESPIPE;
    if (FileType(*in) == S_IFDIR) return -EISDIR;
    bool use_off;
    int64_t off = 0;
    if (a.a[1] != 0 && in->Seek(0, SEEK_CUR) < 0) return -EINVAL;
    RETURN_IF_ERRNO(ReadOffset(t, a.a[1], &use_off, &off));
    if (len == 0) return 0;
    nonblock |= Nonblocking(*out);
    int64_t r = FileToPipe(t, *in, use_off ? &off : nullptr, opipe->pipe(), len,
                           nonblock);
    if (r > 0 && use_off && WriteOffset(t, a.a[1], off) < 0) return -EFAULT;
    return r;
  }
  return -EINVAL;  // one end must be a pipe
}

int64_t SysTee(Task& t, const SyscallArgs& a) {
  uint64_t len = std::min<uint64_t>(a.a[2], kMaxRw);
  unsigned flags = static_cast<unsigned>(a.a[3]);
  if (flags & ~kSpliceAll) return -EINVAL;
  std::shared_ptr<fs::File> in, out;
  RETURN_IF_ERRNO(InOutFiles(t, a.a[0], a.a[1], &in, &out));
  fs::PipeEnd* ipipe = AsPipe(*in);
  fs::PipeEnd* opipe = AsPipe(*out);
  if (ipipe == nullptr || opipe == nullptr) return -EINVAL;
  if (&ipipe->pipe() == &opipe->pipe()) return -EINVAL;
  if (len == 0) return 0;
  bool nonblock = (flags & kSpliceNonblock) || Nonblocking(*in) ||
                  Nonblocking(*out);
  return PipeToPipe(t, ipipe->pipe(), opipe->pipe(), len, nonblock,
                    /*consume=*/false);
}

int64_t SysVmsplice(Task& t, const SyscallArgs& a) {
  unsigned flags = static_cast<unsigned>(a.a[3]);
  if (flags & ~kSpliceAll) return -EINVAL;
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  fs::PipeEnd* pipe = AsPipe(*f);
  if (pipe == nullptr) return -EBADF;
  uint64_t cnt = a.a[2];
  if (cnt > kIovMax) return -EINVAL;
  std::vector<iovec> iov(cnt);
  if (cnt > 0)
    RETURN_IF_ERRNO(CopyInBytes(t, a.a[1], iov.data(), cnt * sizeof(iovec)));
  bool nonblock = (flags & kSpliceNonblock) != 0;
  bool to_pipe = Writable(*f);
  if (!to_pipe && !Readable(*f)) return -EBADF;
  uint64_t done = 0;
  std::vector<uint8_t> buf;
  for (const iovec& v : iov) {
    uint64_t base = reinterpret_cast<uint64_t>(v.iov_base);
    uint64_t vdone = 0;
    while (vdone < v.iov_len && done < kMaxRw) {
      uint64_t want = std::min({v.iov_len - vdone, kChunk, kMaxRw - done});
      buf.resize(want);
      int64_t r;
      if (to_pipe) {
        // User memory into the pipe, as a copy (the pages are not gifted).
        int64_t room = pipe->pipe().WaitWritable(nonblock || done > 0, t.io());
        if (room == -EAGAIN && done > 0) return done;
        if (room < 0) return done > 0 ? done : PipeError(t, room);
        want = std::min(want, static_cast<uint64_t>(room));
        int64_t c = t.mm().CopyIn(base + vdone, buf.data(), want);
        if (c <= 0) return done > 0 ? done : -EFAULT;
        r = pipe->pipe().Write(buf.data(), c, /*nonblock=*/true, t.io());
        if (r < 0) return done > 0 ? done : PipeError(t, r);
      } else {
        // From the pipe into user memory: a readv.
        int64_t avail = pipe->pipe().WaitReadable(nonblock || done > 0, t.io());
        if (avail == -EAGAIN && done > 0) return done;
        if (avail < 0) return done > 0 ? done : avail;
        if (avail == 0) return done;
        uint64_t n = pipe->pipe().Peek(buf.data(), want);
        int64_t c = t.mm().CopyOut(base + vdone, buf.data(), n);
        if (c <= 0) return done > 0 ? done : -EFAULT;
        pipe->pipe().Discard(c);
        r = c;
      }
      vdone += r;
      done += r;
      if (static_cast<uint64_t>(r) < want) return done;
    }
  }
  return done;
}

// sendfile(out_fd, in_fd, offset, count): from a regular file to any
// writable file.
int64_t SysSendfile(Task& t, const SyscallArgs& a) {
  std::shared_ptr<fs::File> in, out;
  RETURN_IF_ERRNO(InOutFiles(t, a.a[1], a.a[0], &in, &out));
  if (out->StatusFlags() & O_APPEND) return -EINVAL;
  // An offset needs a file with positions (FMODE_PREAD): ESPIPE first.
  if (a.a[2] != 0 && in->Seek(0, SEEK_CUR) < 0) return -ESPIPE;
  // Only files with page-cache-like data: not pipes, not sockets.
  if (FileType(*in) != S_IFREG) return -EINVAL;
  bool use_off;
  int64_t off = 0;
  int64_t r = ReadOffset(t, a.a[2], &use_off, &off);
  if (r < 0) return r;
  uint64_t len = std::min<uint64_t>(a.a[3], kMaxRw);
  if (!use_off) {
    off = in->Seek(0, SEEK_CUR);
    if (off < 0) return off;
  }
  int64_t start = off;
  if (fs::PipeEnd* opipe = AsPipe(*out)) {
    r = len == 0 ? 0
                 : FileToPipe(t, *in, &off, opipe->pipe(), len,
                              Nonblocking(*out));
  } else {
    std::vector<uint8_t> buf(std::min(len, kChunk));
    uint64_t done = 0;
    r = 0;
    while (done < len) {
      uint64_t want = std::min(len - done, kChunk);
      int64_t n = in->Read(buf.data(), want, off, t.io());
      if (n < 0) {
        r = n;
        break;
      }
      if (n == 0) break;
      int64_t w = out->Write(buf.data(), n, -1, t.io());
      if (w < 0) {
        r = w;
        break;
      }
      off += w;
      done += w;
      if (w < n || static_cast<uint64_t>(n) < want) break;
    }
    if (done > 0) r = done;
    if (r == -EPIPE) PipeError(t, r);
  }
  if (off != start) {
    if (use_off) {
      if (WriteOffset(t, a.a[2], off) < 0) return -EFAULT;
    } else {
      in->Seek(off, SEEK_SET);
    }
  }
  return r;
}

int64_t SysCopyFileRange(Task& t, const SyscallArgs& a) {
  if (a.a[5] != 0) return -EINVAL;
  std::shared_ptr<fs::File> in, out;
  RETURN_IF_ERRNO(InOutFiles(t, a.a[0], a.a[2], &in, &out));
  if (out->StatusFlags() & O_APPEND) return -EBADF;
  uint32_t itype = FileType(*in), otype = FileType(*out);
  if (itype == S_IFDIR || otype == S_IFDIR) return -EISDIR;
  if (itype != S_IFREG || otype != S_IFREG) return -EINVAL;
  // Only within one filesystem, as Linux >= 5.19 for filesystems without
  // a copy_file_range method of their own (tmpfs, ext4...): the device
  // number stands for the superblock.
  struct stat ist, ost;
  if (in->Stat(&ist) < 0 || out->Stat(&ost) < 0) return -EINVAL;
  if (ist.st_dev != ost.st_dev) return -EXDEV;
  int64_t ioff = 0, ooff = 0;
  bool use_in = a.a[1] != 0, use_out = a.a[3] != 0;
  if (use_in) RETURN_IF_ERRNO(CopyInObj(t, a.a[1], &ioff));
  if (use_out) RETURN_IF_ERRNO(CopyInObj(t, a.a[3], &ooff));
  if (!use_in) ioff = in->Seek(0, SEEK_CUR);
  if (!use_out) ooff = out->Seek(0, SEEK_CUR);
  uint64_t count = a.a[4];
  // generic_copy_file_checks: offsets must not wrap (as unsigned), then
  // rw_verify_area refuses negative ones.
  if (static_cast<uint64_t>(ioff) + count < static_cast<uint64_t>(ioff) ||
      static_cast<uint64_t>(ooff) + count < static_cast<uint64_t>(ooff)) {
    return -EOVERFLOW;
  }
  if (ioff < 0 || ooff < 0) return -EINVAL;
  int64_t r = 0;
  uint64_t len = std::min<uint64_t>(count, kMaxRw);
  // Overlapping ranges of one file are refused, as generic_copy_file_checks.
  if (in->inode() == out->inode() && len > 0 &&
      static_cast<uint64_t>(ioff) < ooff + len &&
      static_cast<uint64_t>(ooff) < ioff + len) {
    return -EINVAL;
  }
  std::vector<uint8_t> buf(std::min(len, kChunk));
  uint64_t done = 0;
  r = 0;
  while (done < len) {
    uint64_t want = std::min(len - done, kChunk);
    int64_t n = in->Read(buf.data(), want, ioff + done, t.io());
    if (n < 0) {
      r = n;
      break;
    }
    if (n == 0) break;
    int64_t w = out->Write(buf.data(), n, ooff + done, t.io());
    if (w < 0) {
      r = w;
      break;
    }
    done += w;
    if (w < n) break;
  }
  if (done == 0) return r;
  if (use_in) {
    if (WriteOffset(t, a.a[1], ioff + done) < 0) return -EFAULT;
  } else {
    in->Seek(ioff + done, SEEK_SET);
  }
  if (use_out) {
    if (WriteOffset(t, a.a[3], ooff + done) < 0) return -EFAULT;
  } else {
    out->Seek(ooff + done, SEEK_SET);
  }
  return done;
}

}  // namespace

void RegisterSplice(Entry* table) {
  table[SYS_sendfile] = {SysSendfile, "sendfile"};
  table[SYS_splice] = {SysSplice, "splice"};
  table[SYS_tee] = {SysTee, "tee"};
  table[SYS_vmsplice] = {SysVmsplice, "vmsplice"};
  table[SYS_copy_file_range] = {SysCopyFileRange, "copy_file_range"};
}

}  // namespace sandboxd::syscalls
