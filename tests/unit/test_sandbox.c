/* Unit tests for src/sandbox: namespaces, filesystem view, seccomp, rlimits, the watchdog path,
 * the report. The sandboxed programs are /bin/sh and a helper compiled at test time with cc.
 * Parts that need user namespaces, root or cgroup v2 are skipped (with the reason printed) on
 * machines without them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "sandbox/sandbox.h"
#include "util/clock.h"
#include "util/diag.h"
#include "util/fs.h"
#include "util/proc.h"

#define TEST_NAME "sandbox"
#include "unit/helpers.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

/* clang-format off */
/* The helper: runs its arguments as a list of commands, one output line each, then "end". */
static const char helper_src[] =
	"#define _GNU_SOURCE\n"
	"#include <arpa/inet.h>\n#include <dirent.h>\n#include <errno.h>\n#include <fcntl.h>\n"
	"#include <netinet/in.h>\n#include <pthread.h>\n#include <sched.h>\n#include <signal.h>\n"
	"#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <sys/mount.h>\n"
	"#include <sys/ptrace.h>\n#include <sys/socket.h>\n#include <sys/stat.h>\n"
	"#include <sys/syscall.h>\n#include <sys/wait.h>\n#include <unistd.h>\n"
	"#include <linux/sched.h>\n"
	"extern char **environ;\n"
	"static const char *en(int e) { const char *n = strerrorname_np(e); return n ? n : \"?\"; }\n"
	"static void *thr(void *a) { return a; }\n"
	"static int cmp(const void *a, const void *b) {\n"
	"  return strcmp(*(char *const *)a, *(char *const *)b); }\n"
	"int main(int argc, char **argv) {\n"
	"  setvbuf(stdout, NULL, _IONBF, 0);\n"
	"  for (int i = 1; i < argc; i++) {\n"
	"    const char *c = argv[i];\n"
	"    if (!strcmp(c, \"pid\")) {\n"
	"      int n = 0; DIR *d = opendir(\"/proc\"); struct dirent *e;\n"
	"      while (d && (e = readdir(d))) if (e->d_name[0] >= '0' && e->d_name[0] <= '9') n++;\n"
	"      if (d) closedir(d);\n"
	"      printf(\"pid %d ppid %d procs %d\\n\", getpid(), getppid(), n);\n"
	"    } else if (!strcmp(c, \"passed\")) {\n"
	"      char b[64] = {0}; int open_fds = 0;\n"
	"      for (int fd = 3; fd < 64; fd++) if (fcntl(fd, F_GETFD) >= 0) open_fds++;\n"
	"      long n = pread(3, b, sizeof b - 1, 0);\n"
	"      printf(\"passed %d fd3 %s\\n\", open_fds, n > 0 ? b : en(errno));\n"
	"    } else if (!strcmp(c, \"connect\")) {\n"
	"      int s = socket(AF_INET, SOCK_STREAM, 0); struct sockaddr_in a = {0};\n"
	"      a.sin_family = AF_INET; a.sin_port = htons((unsigned short)atoi(argv[++i]));\n"
	"      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);\n"
	"      if (s < 0) printf(\"connect %s\\n\", en(errno));\n"
	"      else if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) printf(\"connect ok\\n\");\n"
	"      else printf(\"connect %s\\n\", en(errno));\n"
	"    } else if (!strcmp(c, \"inet\")) {\n"
	"      int s = socket(AF_INET, SOCK_DGRAM, 0); printf(\"inet %s\\n\", s >= 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"netlink\")) {\n"
	"      int s = socket(AF_NETLINK, SOCK_RAW, 0); printf(\"netlink %s\\n\", s >= 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"unix\")) {\n"
	"      int sv[2]; int s = socket(AF_UNIX, SOCK_STREAM, 0);\n"
	"      printf(\"unix %s\\n\", s >= 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"ptrace\")) {\n"
	"      printf(\"ptrace %s\\n\", ptrace(PTRACE_TRACEME, 0, 0, 0) == 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"unshare\")) {\n"
	"      printf(\"unshare %s\\n\", unshare(CLONE_NEWNS) == 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"mount\")) {\n"
	"      printf(\"mount %s\\n\", mount(\"none\", \"/tmp\", \"tmpfs\", 0, 0) == 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"uring\")) {\n"
	"      char params[120] = {0}; long r = syscall(SYS_io_uring_setup, 4, params);\n"
	"      printf(\"uring %s\\n\", r >= 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"clonens\")) {\n"
	"      long r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);\n"
	"      if (r == 0) _exit(0);\n"
	"      printf(\"clonens %s\\n\", r > 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"thread\")) {\n"
	"      pthread_t t; int r = pthread_create(&t, 0, thr, 0);\n"
	"      if (!r) pthread_join(t, 0);\n"
	"      printf(\"thread %s\\n\", r ? en(r) : \"ok\");\n"
	"    } else if (!strcmp(c, \"rawfork\")) {\n"
	"      long p = syscall(SYS_fork); if (p == 0) _exit(3); int st = 0;\n"
	"      if (p > 0) waitpid((pid_t)p, &st, 0);\n"
	"      printf(\"rawfork %s %d\\n\", p > 0 ? \"ok\" : en(errno), WEXITSTATUS(st));\n"
	"    } else if (!strcmp(c, \"x32fork\")) {\n"
	"      long p = syscall(0x40000000L | SYS_fork); if (p == 0) _exit(3);\n"
	"      printf(\"x32fork %s\\n\", p > 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"vfork\")) {\n"
	"      pid_t p = vfork(); if (p == 0) _exit(4); int st = 0;\n"
	"      if (p > 0) waitpid(p, &st, 0);\n"
	"      printf(\"vfork %s %d\\n\", p > 0 ? \"ok\" : en(errno), WEXITSTATUS(st));\n"
	"    } else if (!strcmp(c, \"clone3\")) {\n"
	"      struct clone_args ca; memset(&ca, 0, sizeof ca); ca.exit_signal = SIGCHLD;\n"
	"      long p = syscall(SYS_clone3, &ca, sizeof ca); if (p == 0) _exit(5); int st = 0;\n"
	"      if (p > 0) waitpid((pid_t)p, &st, 0);\n"
	"      printf(\"clone3 %s\\n\", p > 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"affinity\")) {\n"
	"      cpu_set_t set; CPU_ZERO(&set); sched_getaffinity(0, sizeof set, &set);\n"
	"      printf(\"affinity %s\\n\", sched_setaffinity(0, sizeof set, &set) == 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"exec\")) {\n"
	"      char *const args[] = {argv[0], \"pid\", NULL}; execve(argv[0], args, environ);\n"
	"      printf(\"exec %s\\n\", en(errno));\n"
	"    } else if (!strcmp(c, \"mkdir\")) {\n"
	"      const char *p = argv[++i];\n"
	"      printf(\"mkdir %s %s\\n\", p, mkdir(p, 0755) == 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"symlink\")) {\n"
	"      const char *t = argv[++i], *p = argv[++i];\n"
	"      printf(\"symlink %s %s\\n\", p, symlink(t, p) == 0 ? \"ok\" : en(errno));\n"
	"    } else if (!strcmp(c, \"write\")) {\n"
	"      const char *p = argv[++i]; int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);\n"
	"      if (fd < 0 || write(fd, \"data\\n\", 5) != 5) printf(\"write %s %s\\n\", p, en(errno));\n"
	"      else printf(\"write %s ok\\n\", p);\n"
	"      if (fd >= 0) close(fd);\n"
	"    } else if (!strcmp(c, \"read\")) {\n"
	"      const char *p = argv[++i]; char b[64]; int fd = open(p, O_RDONLY);\n"
	"      ssize_t n = fd >= 0 ? read(fd, b, sizeof b - 1) : -1;\n"
	"      if (n < 0) printf(\"read %s %s\\n\", p, en(errno));\n"
	"      else { b[n] = 0; b[strcspn(b, \"\\n\")] = 0; printf(\"read %s ok %s\\n\", p, b); }\n"
	"      if (fd >= 0) close(fd);\n"
	"    } else if (!strcmp(c, \"ls\")) {\n"
	"      const char *p = argv[++i]; DIR *d = opendir(p); struct dirent *e; char *names[256]; int n = 0;\n"
	"      if (!d) { printf(\"ls %s %s\\n\", p, en(errno)); continue; }\n"
	"      while ((e = readdir(d)) && n < 256) if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);\n"
	"      closedir(d); qsort(names, (size_t)n, sizeof names[0], cmp);\n"
	"      printf(\"ls %s\", p); for (int k = 0; k < n; k++) printf(\" %s\", names[k]); printf(\"\\n\");\n"
	"    } else if (!strcmp(c, \"fork\")) {\n"
	"      int max = atoi(argv[++i]), n = 0, err = 0;\n"
	"      for (; n < max; n++) { pid_t p = fork(); if (p == 0) { close(1); pause(); _exit(0); }\n"
	"        if (p < 0) { err = errno; break; } }\n"
	"      printf(\"fork %d %s\\n\", n, err ? en(err) : \"none\");\n"
	"    } else if (!strcmp(c, \"spin\")) {\n"
	"      printf(\"spinning\\n\"); for (volatile unsigned long k = 0;; k++) ;\n"
	"    } else if (!strcmp(c, \"bigwrite\")) {\n"
	"      const char *p = argv[++i]; long want = atol(argv[++i]), done = 0; static char b[65536];\n"
	"      int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644), err = 0;\n"
	"      while (fd >= 0 && done < want) { ssize_t w = write(fd, b, sizeof b);\n"
	"        if (w <= 0) { err = errno; break; } done += w; }\n"
	"      printf(\"bigwrite %ld %s\\n\", done, err ? en(err) : \"none\");\n"
	"    } else if (!strcmp(c, \"status\")) {\n"
	"      char line[256]; FILE *f = fopen(\"/proc/self/status\", \"r\");\n"
	"      printf(\"status\");\n"
	"      while (f && fgets(line, sizeof line, f)) {\n"
	"        line[strcspn(line, \"\\n\")] = 0;\n"
	"        if (!strncmp(line, \"Uid:\", 4) || !strncmp(line, \"CapEff:\", 7) || !strncmp(line, \"CapPrm:\", 7)\n"
	"            || !strncmp(line, \"CapBnd:\", 7) || !strncmp(line, \"NoNewPrivs:\", 11) || !strncmp(line, \"Seccomp:\", 8)) {\n"
	"          for (char *q = line; *q; q++) if (*q == '\\t') *q = ' ';\n"
	"          printf(\" [%s]\", line); } }\n"
	"      printf(\"\\n\"); if (f) fclose(f);\n"
	"    } else if (!strcmp(c, \"env\")) {\n"
	"      printf(\"env\"); for (char **e = environ; *e; e++) printf(\" %s\", *e); printf(\"\\n\");\n"
	"    } else if (!strcmp(c, \"fds\")) {\n"
	"      DIR *d = opendir(\"/proc/self/fd\"); struct dirent *e; printf(\"fds\");\n"
	"      while (d && (e = readdir(d))) if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))\n"
	"        printf(\" %s\", e->d_name);\n"
	"      printf(\"\\n\"); if (d) closedir(d);\n"
	"    } else if (!strcmp(c, \"hostname\")) {\n"
	"      char h[128] = \"\"; gethostname(h, sizeof h); printf(\"hostname %s\\n\", h);\n"
	"    } else if (!strcmp(c, \"cwd\")) {\n"
	"      char w[512] = \"\"; printf(\"cwd %s\\n\", getcwd(w, sizeof w) ? w : en(errno));\n"
	"    } else { printf(\"unknown %s\\n\", c); }\n"
	"  }\n"
	"  printf(\"end\\n\");\n"
	"  return 0;\n"
	"}\n";
/* clang-format on */

/* clang-format off */
/* The W^X helper: attacks that write machine code (x86-64 `mov $42, %eax; ret`) somewhere and run
 * it, each printing "<name> executed 42" when it worked or "<name> <step> <ERRNO>" when refused,
 * and honest programs (dlopen, threads churning malloc arenas, thread stacks). wx_target
 * (`mov $7, %eax; ret`) sits alone on a page of the text segment, for the patching attacks. */
static const char wx_helper_src[] =
	"#define _GNU_SOURCE\n"
	"#include <dlfcn.h>\n"
	"#include <errno.h>\n"
	"#include <fcntl.h>\n"
	"#include <pthread.h>\n"
	"#include <stdint.h>\n"
	"#include <stdio.h>\n"
	"#include <stdlib.h>\n"
	"#include <string.h>\n"
	"#include <sys/mman.h>\n"
	"#include <sys/personality.h>\n"
	"#include <sys/shm.h>\n"
	"#include <unistd.h>\n"
	"/* wx_target: `mov $7, %eax; ret`, alone on its page of the text segment */\n"
	"__asm__(\".pushsection .text.wxpage,\\\"ax\\\",@progbits\\n.balign 4096\\n.globl wx_target\\n\"\n"
	"        \".type wx_target,@function\\nwx_target: mov $7, %eax\\nret\\n.balign 4096\\n.popsection\\n\");\n"
	"int wx_target(void);\n"
	"static int (*volatile target)(void) = wx_target;\n"
	"static const unsigned char code42[] = {0xb8, 0x2a, 0x00, 0x00, 0x00, 0xc3}; /* mov $42,%eax; ret */\n"
	"static const char *en(int e) { const char *n = strerrorname_np(e); return n ? n : \"?\"; }\n"
	"static int call(void *p) { return ((int (*)(void))p)(); }\n"
	"static void *churn(void *a) {\n"
	"  void *keep[64] = {0};\n"
	"  for (unsigned i = 0; i < 4000; i++) { unsigned k = i % 64; free(keep[k]);\n"
	"    keep[k] = malloc(512 + (i * 7919u) % 200000u); if (keep[k]) memset(keep[k], 1, 64); }\n"
	"  for (unsigned k = 0; k < 64; k++) free(keep[k]);\n"
	"  return a;\n"
	"}\n"
	"static void *nop(void *a) { volatile char buf[65536]; buf[0] = 1; buf[65535] = buf[0]; return a; }\n"
	"int main(int argc, char **argv) {\n"
	"  setvbuf(stdout, NULL, _IONBF, 0);\n"
	"  long pg = sysconf(_SC_PAGESIZE);\n"
	"  for (int i = 1; i < argc; i++) {\n"
	"    const char *c = argv[i];\n"
	"    if (!strcmp(c, \"selfcode\")) {\n"
	"      printf(\"selfcode %d\\n\", target());\n"
	"    } else if (!strcmp(c, \"rwx\")) {\n"
	"      void *p = mmap(0, (size_t)pg, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);\n"
	"      if (p == MAP_FAILED) { printf(\"rwx mmap %s\\n\", en(errno)); continue; }\n"
	"      memcpy(p, code42, sizeof code42); printf(\"rwx executed %d\\n\", call(p));\n"
	"    } else if (!strcmp(c, \"patch\") || !strcmp(c, \"patchrwx\")) {\n"
	"      void *p = (void *)(uintptr_t)wx_target; int rwx = !strcmp(c, \"patchrwx\");\n"
	"      if (mprotect(p, (size_t)pg, PROT_READ | PROT_WRITE | (rwx ? PROT_EXEC : 0))) { printf(\"%s rw %s\\n\", c, en(errno)); continue; }\n"
	"      memcpy(p, code42, sizeof code42);\n"
	"      if (!rwx && mprotect(p, (size_t)pg, PROT_READ | PROT_EXEC)) { printf(\"%s rx %s\\n\", c, en(errno)); continue; }\n"
	"      printf(\"%s executed %d\\n\", c, target());\n"
	"    } else if (!strcmp(c, \"memfd\")) {\n"
	"      int fd = memfd_create(\"wx\", MFD_CLOEXEC);\n"
	"      if (fd < 0) { printf(\"memfd create %s\\n\", en(errno)); continue; }\n"
	"      if (write(fd, code42, sizeof code42) != (ssize_t)sizeof code42 || ftruncate(fd, pg)) { printf(\"memfd write %s\\n\", en(errno)); continue; }\n"
	"      void *p = mmap(0, (size_t)pg, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);\n"
	"      if (p == MAP_FAILED) { printf(\"memfd mmap %s\\n\", en(errno)); continue; }\n"
	"      printf(\"memfd executed %d\\n\", call(p));\n"
	"    } else if (!strcmp(c, \"fileexec\")) {\n"
	"      const char *path = argv[++i];\n"
	"      int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);\n"
	"      if (fd < 0) { printf(\"fileexec %s open %s\\n\", path, en(errno)); continue; }\n"
	"      if (write(fd, code42, sizeof code42) != (ssize_t)sizeof code42 || ftruncate(fd, pg)) { printf(\"fileexec %s write %s\\n\", path, en(errno)); continue; }\n"
	"      void *p = mmap(0, (size_t)pg, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);\n"
	"      int e = errno; close(fd); unlink(path);\n"
	"      if (p == MAP_FAILED) { printf(\"fileexec %s mmap %s\\n\", path, en(e)); continue; }\n"
	"      printf(\"fileexec %s executed %d\\n\", path, call(p));\n"
	"    } else if (!strcmp(c, \"procmem\")) {\n"
	"      int fd = open(\"/proc/self/mem\", O_RDWR | O_CLOEXEC);\n"
	"      if (fd < 0) { printf(\"procmem open %s\\n\", en(errno)); continue; }\n"
	"      if (pwrite(fd, code42, sizeof code42, (off_t)(uintptr_t)wx_target) != (ssize_t)sizeof code42) { printf(\"procmem write %s\\n\", en(errno)); continue; }\n"
	"      printf(\"procmem executed %d\\n\", target());\n"
	"    } else if (!strcmp(c, \"shmexec\")) {\n"
	"      int id = shmget(IPC_PRIVATE, (size_t)pg, IPC_CREAT | 0700);\n"
	"      if (id < 0) { printf(\"shmexec shmget %s\\n\", en(errno)); continue; }\n"
	"      void *w = shmat(id, 0, 0), *x = shmat(id, 0, SHM_EXEC | SHM_RDONLY); int e = errno;\n"
	"      shmctl(id, IPC_RMID, 0);\n"
	"      if (w == (void *)-1 || x == (void *)-1) { printf(\"shmexec shmat %s\\n\", en(e)); continue; }\n"
	"      memcpy(w, code42, sizeof code42); printf(\"shmexec executed %d\\n\", call(x));\n"
	"    } else if (!strcmp(c, \"mremapdup\")) {\n"
	"      void *x = mmap(0, (size_t)pg, PROT_READ | PROT_EXEC, MAP_SHARED | MAP_ANONYMOUS, -1, 0);\n"
	"      if (x == MAP_FAILED) { printf(\"mremapdup mmap %s\\n\", en(errno)); continue; }\n"
	"      void *w = mremap(x, 0, (size_t)pg, MREMAP_MAYMOVE);\n"
	"      if (w == MAP_FAILED) { printf(\"mremapdup mremap %s\\n\", en(errno)); continue; }\n"
	"      if (mprotect(w, (size_t)pg, PROT_READ | PROT_WRITE)) { printf(\"mremapdup mprotect %s\\n\", en(errno)); continue; }\n"
	"      memcpy(w, code42, sizeof code42); printf(\"mremapdup executed %d\\n\", call(x));\n"
	"    } else if (!strcmp(c, \"personality\")) {\n"
	"      if (personality(READ_IMPLIES_EXEC) < 0) { printf(\"personality %s\\n\", en(errno)); continue; }\n"
	"      void *p = mmap(0, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);\n"
	"      if (p == MAP_FAILED) { printf(\"personality mmap %s\\n\", en(errno)); continue; }\n"
	"      memcpy(p, code42, sizeof code42); printf(\"personality executed %d\\n\", call(p));\n"
	"    } else if (!strcmp(c, \"dl\")) {\n"
	"      const char *lib = argv[++i], *sym = argv[++i];\n"
	"      void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);\n"
	"      void *f = h ? dlsym(h, sym) : NULL;\n"
	"      if (!f) { printf(\"dl %s %s\\n\", sym, dlerror()); continue; }\n"
	"      if (!strcmp(sym, \"cos\")) printf(\"dl cos %.0f\\n\", ((double (*)(double))f)(0.0));\n"
	"      else printf(\"dl %s %d\\n\", sym, ((int (*)(void))f)());\n"
	"    } else if (!strcmp(c, \"arenas\") || !strcmp(c, \"stacks\")) {\n"
	"      int n = atoi(argv[++i]), ok = 0, arenas = !strcmp(c, \"arenas\"); pthread_t t[64]; pthread_attr_t at;\n"
	"      pthread_attr_init(&at); pthread_attr_setstacksize(&at, 256u << 10);\n"
	"      for (int k = 0; k < n && k < 64; k++) ok += pthread_create(&t[k], &at, arenas ? churn : nop, 0) == 0;\n"
	"      for (int k = 0; k < ok; k++) pthread_join(t[k], 0);\n"
	"      printf(\"%s %d of %d\\n\", c, ok, n);\n"
	"    } else { printf(\"unknown %s\\n\", c); }\n"
	"  }\n"
	"  printf(\"end\\n\");\n"
	"  return 0;\n"
	"}\n";
/* A library for dlopen, with thread-local storage (the loader allocates its TLS block). */
static const char wx_lib_src[] = "__thread int t;\nint wxlib_answer(void) { t++; return 41 + t; }\n";
/* clang-format on */

static char helper[PATH_MAX];       /* <tmpdir>/bin/helper */
static char wx_helper[PATH_MAX];    /* <tmpdir>/bin/wxhelper (NULL-string: not x86-64) */
static char wx_lib[PATH_MAX];       /* <tmpdir>/bin/libwx.so */
static char bindir[PATH_MAX];       /* <tmpdir>/bin */
static struct sandbox_report probe; /* the report of a default spawn, for skip decisions */
static bool probe_ok;

static bool layer_on(enum sandbox_layer l)
{
	return probe_ok && probe.layer[l].on;
}

/* Skips the calling test when a layer it needs is off here, saying why. */
#define NEED_LAYER(l)                                                          \
	do {                                                                   \
		if (!layer_on(l)) {                                            \
			printf("  skipped: the %s layer is off here (%s)\n",   \
			       sandbox_layer_name(l),                          \
			       probe_ok ? probe.layer[l].detail : "no probe"); \
			skip();                                                \
		}                                                              \
	} while (0)

/* Runs argv in the sandbox, collects its stdout lines (joined with '\n') until EOF or
 * `timeout_s`, then finishes it (grace 5 s), leaving the finished sandbox in *sb. Returns
 * sandbox_spawn's code. */
static int run_sb_keep(const struct sandbox_opts *o, const char *const *argv, char *out,
		       size_t size, double timeout_s, struct ca_run_result *fate,
		       struct sandbox *sb, struct ca_diag *d)
{
	size_t off = 0;
	double end = ca_now() + timeout_s;
	char err_path[PATH_MAX];
	assert_int_equal(ca_path_join(err_path, sizeof err_path, tmpdir, "stderr.txt"), 0);
	int rc = sandbox_spawn(sb, argv, o, err_path, d);
	out[0] = '\0';
	memset(fate, 0, sizeof *fate);
	if (rc)
		return rc;
	close(sb->child.to_child);
	sb->child.to_child = -1;
	for (;;) {
		char *line = NULL;
		struct ca_diag rd;
		double left = end - ca_now();
		if (left <= 0 || ca_child_read_line(&sb->child, 65536, left, &line, &rd) != 0)
			break;
		int n = snprintf(out + off, size - off, "%s%s", off ? "\n" : "", line);
		if (n > 0 && (size_t)n < size - off)
			off += (size_t)n;
		free(line);
	}
	sandbox_finish(sb, 5.0, fate);
	return 0;
}

/* run_sb_keep, also handing back the report. */
static int run_sb(const struct sandbox_opts *o, const char *const *argv, char *out, size_t size,
		  double timeout_s, struct ca_run_result *fate, struct sandbox_report *rep,
		  struct ca_diag *d)
{
	struct sandbox sb;
	int rc = run_sb_keep(o, argv, out, size, timeout_s, fate, &sb, d);
	if (rep)
		*rep = sb.report;
	return rc;
}

/* The helper with commands, default options plus the helper's directory bound. */
static int run_helper(struct sandbox_opts *o, const char *const *cmds, char *out, size_t size,
		      struct ca_run_result *fate, struct ca_diag *d)
{
	const char *argv[32] = {helper};
	size_t n = 1;
	for (; cmds && cmds[n - 1] && n < 31; n++)
		argv[n] = cmds[n - 1];
	argv[n] = NULL;
	return run_sb(o, argv, out, size, 20.0, fate, NULL, d);
}

static int group_setup(void **state)
{
	char src[PATH_MAX], cmd[5 * PATH_MAX];
	struct sandbox_bind bind;
	struct sandbox_opts o = {0};
	struct ca_run_result fate;
	struct ca_diag d;
	FILE *f;

	if (setup_dir(state))
		return -1;
	if (ca_path_join(bindir, sizeof bindir, tmpdir, "bin") ||
	    ca_path_join(helper, sizeof helper, bindir, "helper") ||
	    ca_path_join(src, sizeof src, tmpdir, "helper.c"))
		return -1;
	if (mkdir(bindir, 0755) != 0 || chmod(bindir, 0755) != 0)
		return -1;
	f = fopen(src, "w");
	if (!f)
		return -1;
	fputs(helper_src, f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "cc -O1 -o %s %s -lpthread", helper, src);
	if (system(cmd) != 0) {
		fprintf(stderr, "cannot compile the test helper\n");
		return -1;
	}
#if defined(__x86_64__)
	/* the W^X helper (its machine code is x86-64) and the library it loads */
	if (ca_path_join(wx_helper, sizeof wx_helper, bindir, "wxhelper") ||
	    ca_path_join(wx_lib, sizeof wx_lib, bindir, "libwx.so") ||
	    ca_path_join(src, sizeof src, tmpdir, "wxhelper.c"))
		return -1;
	const char *const srcs[][2] = {{"wxhelper.c", wx_helper_src}, {"wxlib.c", wx_lib_src}};
	for (size_t i = 0; i < 2; i++) {
		char path[PATH_MAX];
		if (ca_path_join(path, sizeof path, tmpdir, srcs[i][0]) || !(f = fopen(path, "w")))
			return -1;
		fputs(srcs[i][1], f);
		fclose(f);
	}
	snprintf(cmd, sizeof cmd, "cc -O1 -o %s %s -lpthread -ldl && cc -shared -fPIC -o %s %s/wxlib.c",
		 wx_helper, src, wx_lib, tmpdir);
	if (system(cmd) != 0) {
		fprintf(stderr, "cannot compile the W^X helper\n");
		return -1;
	}
#endif
	/* Probe: what does this machine give? */
	bind = (struct sandbox_bind){.src = bindir};
	o.binds = &bind;
	o.n_binds = 1;
	{
		const char *argv[] = {helper, "pid", NULL};
		struct sandbox sb;
		if (sandbox_spawn(&sb, argv, &o, NULL, &d) == 0) {
			probe = sb.report;
			if (getenv("CA_TEST_VERBOSE")) {
				json_t *j = sandbox_report_json(&probe);
				char *text = json_dumps(j, JSON_INDENT(1));
				printf("%s\n", text);
				free(text);
				json_decref(j);
			}
			probe_ok = true;
			sandbox_finish(&sb, 5.0, &fate);
		} else {
			printf("  probe failed: %s\n", d.msg);
		}
	}
	for (int l = 0; l < SANDBOX_N_LAYERS; l++)
		if (probe_ok && !probe.layer[l].on)
			printf("  note: %s off here: %s\n",
			       sandbox_layer_name((enum sandbox_layer)l), probe.layer[l].detail);
	return 0;
}

static void base_opts(struct sandbox_opts *o, struct sandbox_bind *binds, size_t n)
{
	memset(o, 0, sizeof *o);
	binds[0] = (struct sandbox_bind){.src = bindir};
	o->binds = binds;
	o->n_binds = n;
}

/* ---- report ------------------------------------------------------------------------------------
 */

static void test_report_json(void **state)
{
	(void)state;
	assert_true(probe_ok);
	json_t *j = sandbox_report_json(&probe);
	json_t *layers = json_object_get(j, "layers"), *off = json_object_get(j, "off");
	size_t n_off = 0;
	assert_true(json_is_true(json_object_get(j, "sandbox")));
	assert_true(json_is_boolean(json_object_get(j, "namespaces")));
	assert_true(json_is_boolean(json_object_get(j, "seccomp")));
	assert_true(json_is_integer(json_object_get(j, "uid")));
	assert_true(json_is_string(json_object_get(j, "note")));
	assert_int_equal(json_object_size(layers), SANDBOX_N_LAYERS);
	for (int l = 0; l < SANDBOX_N_LAYERS; l++) {
		json_t *e = json_object_get(layers, sandbox_layer_name((enum sandbox_layer)l));
		assert_non_null(e);
		assert_true(json_is_boolean(json_object_get(e, "on")));
		assert_true(json_is_string(json_object_get(e, "detail")));
		assert_int_equal(json_is_true(json_object_get(e, "on")), probe.layer[l].on);
		if (!probe.layer[l].on) {
			n_off++;
			/* every layer that is off says why */
			assert_true(strlen(probe.layer[l].detail) > 5);
		}
	}
	assert_int_equal(json_array_size(off), n_off);
	assert_int_equal(json_is_true(json_object_get(j, "seccomp")),
			 probe.layer[SANDBOX_SECCOMP].on);
	bool ns = true;
	for (int l = SANDBOX_USER_NS; l <= SANDBOX_UTS_NS; l++)
		ns = ns && probe.layer[l].on;
	assert_int_equal(json_is_true(json_object_get(j, "namespaces")), ns);
	if (probe.layer[SANDBOX_SECCOMP].on) {
		int rules = 0;
		assert_int_equal(
			sscanf(probe.layer[SANDBOX_SECCOMP].detail, "on (%d rules)", &rules), 1);
		assert_int_equal(rules, probe.seccomp_rules);
		assert_true(rules >= 30);
	}
	/* cgroup v2: on where /sys/fs/cgroup is a writable cgroup2 with memory, else said why */
	struct statfs sf;
	if (statfs("/sys/fs/cgroup", &sf) != 0 || sf.f_type != CGROUP2_SUPER_MAGIC) {
		assert_false(probe.layer[SANDBOX_CGROUP].on);
		assert_non_null(
			strstr(probe.layer[SANDBOX_CGROUP].detail, "cgroup v2 not available"));
	}
	if (geteuid() == 0)
		assert_int_equal(probe.uid, 65534);
	else
		assert_int_equal(probe.uid, geteuid());
	/* this machine (root, user namespaces) gets every layer but maybe the cgroup, and MDWE
	 * and Landlock where the kernel has them (Linux 6.3+; Landlock built in and enabled) */
	bool old_kernel_mdwe = strstr(probe.layer[SANDBOX_MDWE].detail, "Linux 6.3+") != NULL;
	bool no_landlock = strstr(probe.layer[SANDBOX_LANDLOCK].detail, "not available") != NULL;
	if (geteuid() == 0 && layer_on(SANDBOX_USER_NS))
		for (int l = 0; l < SANDBOX_N_LAYERS; l++)
			if (l != SANDBOX_CGROUP && !(l == SANDBOX_MDWE && old_kernel_mdwe) &&
			    !(l == SANDBOX_LANDLOCK && no_landlock))
				assert_true(probe.layer[l].on);
	/* the W^X layers say what they do */
	if (layer_on(SANDBOX_SECCOMP_WX)) {
		assert_non_null(strstr(probe.layer[SANDBOX_SECCOMP_WX].detail, "memfd_create"));
		/* with MDWE the kernel refuses exec gains itself; without, the filter kills them */
		assert_int_equal(strstr(probe.layer[SANDBOX_SECCOMP_WX].detail,
					"any mprotect(PROT_EXEC)") != NULL,
				 !layer_on(SANDBOX_MDWE));
	}
	if (layer_on(SANDBOX_NOEXEC))
		assert_non_null(strstr(probe.layer[SANDBOX_NOEXEC].detail, "noexec on /tmp, /dev/shm"));
	if (layer_on(SANDBOX_LANDLOCK))
		assert_non_null(strstr(probe.layer[SANDBOX_LANDLOCK].detail, "ABI "));
	json_decref(j);
}

/* ---- namespaces ---------------------------------------------------------------------------------
 */

static void test_pid_namespace(void **state)
{
	(void)state;
	NEED_LAYER(SANDBOX_PID_NS);
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct ca_run_result fate;
	struct ca_diag d;
	char out[4096];
	base_opts(&o, b, 1);
	const char *cmds[] = {"pid", "hostname", NULL};
	assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), 0);
	/* PID 1, no parent in its namespace, and /proc shows itself only */
	assert_non_null(strstr(out, "pid 1 ppid 0 procs 1\n"));
	if (layer_on(SANDBOX_UTS_NS))
		assert_non_null(strstr(out, "hostname sandbox\n"));
	assert_int_equal(fate.exit_code, 0);

	/* through a shell: the shell is PID 1, the helper PID 2, nothing else (the shell forks:
	 * without the seccomp filter, which kills process creation) */
	o.disable = SANDBOX_BIT(SANDBOX_SECCOMP);
	char script[PATH_MAX + 32];
	snprintf(script, sizeof script, "%s pid; echo $$", helper);
	const char *sh[] = {"/bin/sh", "-c", script, NULL};
	assert_int_equal(run_sb(&o, sh, out, sizeof out, 10, &fate, NULL, &d), 0);
	assert_string_equal(out, "pid 2 ppid 1 procs 2\nend\n1");
}

static int listen_local(int *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 4) != 0 ||
	    getsockname(s, (struct sockaddr *)&a, &len) != 0)
		return -1;
	*port = ntohs(a.sin_port);
	return s;
}

static void test_network(void **state)
{
	(void)state;
	NEED_LAYER(SANDBOX_NET_NS);
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct ca_run_result fate;
	struct ca_run_opts ro = {.timeout_s = 10};
	struct ca_diag d;
	char out[4096], port_s[16];
	int port = 0, s = listen_local(&port);
	assert_true(s >= 0);
	snprintf(port_s, sizeof port_s, "%d", port);

	/* the same helper outside reaches the listener: the test can tell */
	const char *outside[] = {helper, "connect", port_s, NULL};
	assert_int_equal(ca_run(outside, &ro, &fate, &d), 0);
	assert_non_null(strstr(fate.out, "connect ok"));
	ca_run_result_free(&fate);

	/* inside, without seccomp (which would kill the socket() call): no route */
	base_opts(&o, b, 1);
	o.disable = SANDBOX_BIT(SANDBOX_SECCOMP);
	const char *cmds[] = {"connect", port_s, "ls", "/sys/class/net", NULL};
	assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), 0);
	assert_null(strstr(out, "connect ok"));
	assert_non_null(strstr(out, "connect ENETUNREACH"));
	assert_non_null(strstr(out, "ls /sys/class/net lo\n"));
	close(s);
}

/* ---- filesystem ---------------------------------------------------------------------------------
 */

static void write_text(const char *path, const char *text)
{
	struct ca_diag d;
	assert_int_equal(ca_write_file_atomic(path, text, strlen(text), &d), 0);
}

static void test_filesystem(void **state)
{
	(void)state;
	NEED_LAYER(SANDBOX_FILESYSTEM);
	char ro[PATH_MAX], rw[PATH_MAX], priv[PATH_MAX], secret[PATH_MAX], hello[PATH_MAX];
	char ro_new[PATH_MAX], rw_new[PATH_MAX], cwd[PATH_MAX], mine[PATH_MAX], exp[PATH_MAX + 64];
	char out[8192], leak[64];
	struct sandbox_bind b[4];
	struct sandbox_opts o;
	struct ca_run_result fate;
	struct ca_diag d;

	snprintf(leak, sizeof leak, "/tmp/ca-sbx-leak-%d", (int)getpid());
	tmp_path(ro, sizeof ro, "ro");
	tmp_path(rw, sizeof rw, "rw");
	tmp_path(priv, sizeof priv, "private");
	assert_int_equal(ca_mkdirs(ro, 0755, &d), 0);
	assert_int_equal(ca_mkdirs(rw, 0755, &d), 0);
	assert_int_equal(ca_mkdirs(priv, 0755, &d), 0);
	assert_int_equal(ca_path_join(hello, sizeof hello, ro, "hello"), 0);
	assert_int_equal(ca_path_join(secret, sizeof secret, priv, "secret"), 0);
	assert_int_equal(ca_path_join(ro_new, sizeof ro_new, ro, "new"), 0);
	assert_int_equal(ca_path_join(rw_new, sizeof rw_new, rw, "new"), 0);
	write_text(hello, "hi there\n");
	write_text(secret, "reference outputs\n");
	chmod(hello, 0644);
	assert_non_null(getcwd(cwd, sizeof cwd));
	assert_int_equal(ca_path_join(mine, sizeof mine, cwd, "Makefile"), 0);

	base_opts(&o, b, 3);
	b[1] = (struct sandbox_bind){.src = ro};
	b[2] = (struct sandbox_bind){.src = rw, .writable = true};
	const char *cmds[] = {"write", "/usr/sbx-test",
			      "write", "/etc/sbx-test",
			      "write", "/sbx-test",
			      "write", leak,
			      "read",  leak,
			      "read",  secret,
			      "ls",    priv,
			      "read",  hello,
			      "write", ro_new,
			      "write", rw_new,
			      "read",  mine,
			      "ls",    "/root",
			      "write", "/dev/null",
			      "read",  "/etc/hostname",
			      NULL};
	assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), 0);
	assert_int_equal(fate.exit_code, 0);
	assert_non_null(strstr(out, "write /usr/sbx-test EROFS\n"));
	assert_non_null(strstr(out, "write /etc/sbx-test EROFS\n"));
	assert_non_null(strstr(out, "write /sbx-test EROFS\n"));
	snprintf(exp, sizeof exp, "write %s ok\n", leak);
	assert_non_null(strstr(out, exp));
	snprintf(exp, sizeof exp, "read %s ok data\n", leak);
	assert_non_null(strstr(out, exp));
	snprintf(exp, sizeof exp, "read %s ENOENT\n", secret); /* the unbound dir is not there */
	assert_non_null(strstr(out, exp));
	snprintf(exp, sizeof exp, "ls %s ENOENT\n", priv);
	assert_non_null(strstr(out, exp));
	snprintf(exp, sizeof exp, "read %s ok hi there\n", hello);
	assert_non_null(strstr(out, exp));
	snprintf(exp, sizeof exp, "write %s EROFS\n", ro_new);
	assert_non_null(strstr(out, exp));
	snprintf(exp, sizeof exp, "write %s ok\n", rw_new);
	assert_non_null(strstr(out, exp));
	snprintf(exp, sizeof exp, "read %s ENOENT\n", mine); /* the test's own checkout */
	assert_non_null(strstr(out, exp));
	assert_non_null(strstr(out, "ls /root ENOENT\n"));
	assert_non_null(strstr(out, "write /dev/null ok\n"));
	assert_null(strstr(out, "read /etc/hostname ENOENT"));
	/* the writable bind's write reached the host; the read-only one stayed unchanged */
	{
		char *text = NULL;
		size_t len = 0;
		assert_int_equal(ca_read_file(rw_new, 64, &text, &len, &d), 0);
		assert_string_equal(text, "data\n");
		free(text);
		assert_false(ca_is_file(ro_new));
	}
	/* nothing the sandbox wrote to its /tmp reached the host's */
	assert_int_equal(access(leak, F_OK), -1);

	/* dst different from src, cwd, a single file bound (the worker's plan.json is), and a
	 * directory under /dev/shm (where the supervisor keeps its run directories) */
	char shm[64], shm_file[96];
	bool have_shm = ca_is_dir("/dev/shm");
	snprintf(shm, sizeof shm, "/dev/shm/ca-sbx-test-%d", (int)getpid());
	snprintf(shm_file, sizeof shm_file, "%s/in", shm);
	if (have_shm) {
		assert_int_equal(ca_mkdirs(shm, 0755, &d), 0);
		write_text(shm_file, "from shm\n");
		chmod(shm_file, 0644);
	}
	char other[PATH_MAX];
	assert_int_equal(ca_path_join(other, sizeof other, ro, "other"), 0);
	write_text(other, "not bound\n");
	b[1] = (struct sandbox_bind){.src = ro, .dst = "/data/in"};
	b[2] = (struct sandbox_bind){.src = hello};
	b[3] = (struct sandbox_bind){.src = shm, .optional = true};
	o.n_binds = have_shm ? 4 : 3;
	o.cwd = "/data/in";
	const char *cmds2[] = {"read", "/data/in/hello", "cwd",    "read", hello,      "ls",
			       ro,     "read",           shm_file, "ls",   "/data/in", NULL};
	assert_int_equal(run_helper(&o, cmds2, out, sizeof out, &fate, &d), 0);
	assert_non_null(strstr(out, "read /data/in/hello ok hi there\n"));
	assert_non_null(strstr(out, "cwd /data/in\n"));
	snprintf(exp, sizeof exp, "read %s ok hi there\n", hello);
	assert_non_null(strstr(out, exp));
	snprintf(exp, sizeof exp, "ls %s hello\n", ro); /* only the bound file is there */
	assert_non_null(strstr(out, exp));
	assert_non_null(strstr(out, "ls /data/in hello other\n"));
	if (have_shm) {
		snprintf(exp, sizeof exp, "read %s ok from shm\n", shm_file);
		assert_non_null(strstr(out, exp));
		assert_int_equal(ca_remove_tree(shm, &d), 0);
	}
}

/* ---- seccomp ------------------------------------------------------------------------------------
 */

static void test_seccomp(void **state)
{
	(void)state;
	NEED_LAYER(SANDBOX_SECCOMP);
	/* each is killed (SIGSYS) at its forbidden call: escape routes, and process creation in
	 * every form (libc fork = clone(SIGCHLD), the fork and vfork system calls, posix_spawn-like
	 * exec, a second execve) */
	static const char *const killed[][2] = {
		{"ptrace", NULL}, {"unshare", NULL}, {"inet", NULL},    {"netlink", NULL},
		{"mount", NULL},  {"clonens", NULL}, {"uring", NULL},   {"fork", "1"},
		{"rawfork", NULL}, {"vfork", NULL},  {"exec", NULL},    {"x32fork", NULL},
	};
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct ca_run_result fate;
	struct ca_diag d;
	char out[4096];
	base_opts(&o, b, 1);

	for (size_t i = 0; i < sizeof killed / sizeof killed[0]; i++) {
		const char *cmds[] = {"pid", killed[i][0], killed[i][1], NULL};
		assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), 0);
		if (fate.term_signal != SIGSYS)
			fail_msg("%s: expected SIGSYS, got signal %d exit %d: %s", killed[i][0],
				 fate.term_signal, fate.exit_code, out);
		assert_non_null(strstr(out, "pid ")); /* it ran up to the forbidden call */
		assert_null(strstr(out, "end"));
		/* the kill is the whole process, and the supervisor can tell it from a crash */
		struct sandbox fake;
		memset(&fake, 0, sizeof fake);
		fake.report.layer[SANDBOX_SECCOMP].on = true;
		assert_true(sandbox_killed_by_seccomp(&fake, &fate));
	}
	/* what the worker needs still works: AF_UNIX sockets, threads (pthread_create tries
	 * clone3, gets ENOSYS, falls back to clone with CLONE_THREAD); clone3 fails softly */
	const char *ok[] = {"unix", "thread", "clone3", "affinity", NULL};
	assert_int_equal(run_helper(&o, ok, out, sizeof out, &fate, &d), 0);
	/* (sched_setaffinity fails softly: the process keeps the CPUs it was given) */
	assert_string_equal(out, "unix ok\nthread ok\nclone3 ENOSYS\naffinity EPERM\nend");
	assert_int_equal(fate.term_signal, 0);
	assert_int_equal(fate.exit_code, 0);
	{
		struct sandbox fake;
		memset(&fake, 0, sizeof fake);
		fake.report.layer[SANDBOX_SECCOMP].on = true;
		assert_false(sandbox_killed_by_seccomp(&fake, &fate));
	}

	/* the same calls without the filter are not killed (the test can fail) */
	o.disable = SANDBOX_BIT(SANDBOX_SECCOMP);
	const char *free_cmds[] = {"inet", "ptrace", "uring", "affinity", NULL};
	assert_int_equal(run_helper(&o, free_cmds, out, sizeof out, &fate, &d), 0);
	assert_int_equal(fate.term_signal, 0);
	assert_non_null(strstr(out, "inet ok\n"));
	assert_non_null(strstr(out, "affinity ok\n"));
	assert_non_null(strstr(out, "\nend")); /* io_uring may be switched off by a sysctl */
	/* (a separate run: after PTRACE_TRACEME a child's SIGCHLD would stop the helper) */
	const char *free_procs[] = {"inet", "rawfork", "vfork", "clone3",
				    "fork", "2",       "exec",  NULL};
	assert_int_equal(run_helper(&o, free_procs, out, sizeof out, &fate, &d), 0);
	if (fate.term_signal != 0 || !strstr(out, "inet ok\n") ||
	    !strstr(out, "rawfork ok 3\n") || !strstr(out, "vfork ok 4\n") ||
	    !strstr(out, "clone3 ok\n") || !strstr(out, "fork 2 none\n") ||
	    /* the exec replaced the helper, which then ran "pid" and ended */
	    strstr(out, "exec ") || !strstr(out, "\npid ") || !strstr(out, "\nend"))
		fail_msg("without the filter: signal %d: %s", fate.term_signal, out);

	/* allow_processes (a shell, the agent's bash tool): the filter is on, process creation
	 * and exec pass, and the escape routes are still killed */
	o.disable = 0;
	o.allow_processes = true;
	const char *shell_procs[] = {"rawfork", "vfork", "fork", "2", "exec", NULL};
	assert_int_equal(run_helper(&o, shell_procs, out, sizeof out, &fate, &d), 0);
	if (fate.term_signal != 0 || !strstr(out, "rawfork ok 3\n") ||
	    !strstr(out, "vfork ok 4\n") || !strstr(out, "fork 2 none\n") ||
	    strstr(out, "exec ") || !strstr(out, "\npid ") || !strstr(out, "\nend"))
		fail_msg("allow_processes: signal %d: %s", fate.term_signal, out);
	static const char *const still_killed[] = {"ptrace", "unshare", "inet", "clonens",
						   "mount"};
	for (size_t i = 0; i < sizeof still_killed / sizeof still_killed[0]; i++) {
		const char *cmds[] = {"pid", still_killed[i], NULL};
		assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), 0);
		if (fate.term_signal != SIGSYS)
			fail_msg("allow_processes, %s: expected SIGSYS, got signal %d: %s",
				 still_killed[i], fate.term_signal, out);
	}
}

static void test_identity_and_env(void **state)
{
	(void)state;
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct ca_run_result fate;
	struct ca_diag d;
	char out[4096], exp[128];
	const char *env[] = {"FOO=bar", "NOEQUALS", NULL};
	base_opts(&o, b, 1);
	o.env = env;
	setenv("LD_LIBRARY_PATH", "/nonexistent/lib", 1);

	/* a descriptor the supervisor forgot to make close-on-exec (a directory would be a way
	 * around the new root) does not reach the program */
	int leaky = open(tmpdir, O_RDONLY | O_DIRECTORY);
	assert_true(leaky >= 3);
	const char *cmds[] = {"status", "env", "fds", NULL};
	assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), 0);
	assert_non_null(strstr(out, "\nfds 0 1 2\n"));
	{
		/* (outside the sandbox the same helper does see it) */
		struct ca_run_opts ro = {.timeout_s = 10};
		const char *argv[] = {helper, "fds", NULL};
		char want[32], want_last[32];
		snprintf(want, sizeof want, " %d ", leaky);
		snprintf(want_last, sizeof want_last, " %d\n", leaky);
		assert_int_equal(ca_run(argv, &ro, &fate, &d), 0);
		if (!strstr(fate.out, want) && !strstr(fate.out, want_last))
			fail_msg("fd %d not inherited outside: %s", leaky, fate.out);
		ca_run_result_free(&fate);
	}
	close(leaky);
	unsigned uid = geteuid() == 0 ? 65534u : (unsigned)geteuid();
	snprintf(exp, sizeof exp, "[Uid: %u %u %u %u]", uid, uid, uid, uid);
	assert_non_null(strstr(out, exp));
	if (layer_on(SANDBOX_CAPS)) {
		assert_non_null(strstr(out, "[CapEff: 0000000000000000]"));
		assert_non_null(strstr(out, "[CapPrm: 0000000000000000]"));
	}
	if (layer_on(SANDBOX_CAPS) && geteuid() == 0)
		assert_non_null(strstr(out, "[CapBnd: 0000000000000000]"));
	if (layer_on(SANDBOX_NO_NEW_PRIVS))
		assert_non_null(strstr(out, "[NoNewPrivs: 1]"));
	if (layer_on(SANDBOX_SECCOMP))
		assert_non_null(strstr(out, "[Seccomp: 2]"));
	/* exactly the given environment plus PATH and HOME */
	assert_non_null(strstr(out, "\nenv FOO=bar PATH=" SANDBOX_DEFAULT_PATH " HOME=/tmp\n"));

	o.pass_ld_library_path = true;
	const char *cmds2[] = {"env", NULL};
	assert_int_equal(run_helper(&o, cmds2, out, sizeof out, &fate, &d), 0);
	assert_non_null(strstr(out, " LD_LIBRARY_PATH=/nonexistent/lib"));
	unsetenv("LD_LIBRARY_PATH");
}

/* ---- rlimits ------------------------------------------------------------------------------------
 */

static void test_rlimit_fsize(void **state)
{
	(void)state;
	NEED_LAYER(SANDBOX_RLIMITS);
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct ca_run_result fate;
	struct ca_diag d;
	char out[4096], big[PATH_MAX], script[2 * PATH_MAX + 128], err_path[PATH_MAX], tail[1024];
	base_opts(&o, b, 1);
	o.fsize_bytes = 1u << 20;
	o.disable = SANDBOX_BIT(SANDBOX_SECCOMP); /* the shell forks head */
	/* the sandbox's private /tmp, or (without the filesystem layer) the test's directory */
	if (layer_on(SANDBOX_FILESYSTEM))
		snprintf(big, sizeof big, "/tmp/big");
	else
		assert_int_equal(ca_path_join(big, sizeof big, tmpdir, "big"), 0);
	/* a child of the program is killed with SIGXFSZ (128 + 25) */
	snprintf(script, sizeof script, "head -c 4194304 /dev/zero > %s; echo $?; wc -c < %s", big,
		 big);
	const char *sh[] = {"/bin/sh", "-c", script, NULL};
	assert_int_equal(run_sb(&o, sh, out, sizeof out, 10, &fate, NULL, &d), 0);
	assert_string_equal(out, "153\n1048576");
	assert_int_equal(ca_path_join(err_path, sizeof err_path, tmpdir, "stderr.txt"), 0);
	ca_file_tail(err_path, 3, tail, sizeof tail);
	assert_non_null(strstr(tail, "File size limit exceeded")); /* stderr went there */
	/* the program itself: as PID 1 it ignores SIGXFSZ and gets EFBIG at the limit */
	const char *cmds[] = {"bigwrite", big, "4194304", NULL};
	assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), 0);
	if (layer_on(SANDBOX_PID_NS)) {
		assert_non_null(strstr(out, "bigwrite 1048576 EFBIG\n"));
	} else {
		assert_int_equal(fate.term_signal, SIGXFSZ);
		assert_string_equal(out, "");
	}
}

static void test_rlimit_nproc(void **state)
{
	(void)state;
	NEED_LAYER(SANDBOX_RLIMITS);
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct ca_run_result fate;
	struct ca_diag d;
	char out[4096];
	int n = -1;
	char err[32] = "";
	double t0 = ca_now();
	base_opts(&o, b, 1);
	o.nproc = 16;
	/* the second wall against fork bombs, for when the first (seccomp kills process creation)
	 * is not there */
	o.disable = SANDBOX_BIT(SANDBOX_SECCOMP);
	const char *cmds[] = {"fork", "1000", NULL};
	assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), 0);
	assert_int_equal(sscanf(out, "fork %d %31s", &n, err), 2);
	/* the helper itself counts: at most 15 more */
	assert_true(n >= 8 && n < 16);
	assert_string_equal(err, "EAGAIN");
	assert_true(ca_now() - t0 < 10);
	if (layer_on(SANDBOX_USER_NS)) {
		/* per uid inside the user namespace: a second sandbox of the same uid running
		 * at the same time gets its own count */
		struct sandbox sb;
		const char *argv[] = {helper, "fork", "10", "fork", "0", NULL};
		assert_int_equal(sandbox_spawn(&sb, argv, &o, NULL, &d), 0);
		char *line = NULL;
		assert_int_equal(ca_child_read_line(&sb.child, 4096, 10, &line, &d), 0);
		assert_string_equal(line, "fork 10 none");
		free(line);
		assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), 0);
		assert_int_equal(sscanf(out, "fork %d %31s", &n, err), 2);
		assert_true(n >= 8 && n < 16);
		sandbox_finish(&sb, 0, &fate);
	}
}

static void test_rlimit_cpu(void **state)
{
	(void)state;
	NEED_LAYER(SANDBOX_RLIMITS);
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct ca_run_result fate;
	struct ca_diag d;
	char out[4096];
	double t0 = ca_now();
	base_opts(&o, b, 1);
	o.cpu_seconds = 1;
	const char *cmds[] = {"spin", NULL};
	assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), 0);
	assert_string_equal(out, "spinning");
	assert_int_equal(fate.term_signal, SIGKILL);
	assert_false(fate.timed_out);
	assert_true(ca_now() - t0 < 6);
}

/* ---- the watchdog path --------------------------------------------------------------------------
 */

/* Host processes whose PID namespace is `ns` ("pid:[N]"). */
static int count_in_ns(const char *ns)
{
	DIR *dir = opendir("/proc");
	struct dirent *e;
	int n = 0;
	assert_non_null(dir);
	while ((e = readdir(dir))) {
		char link[300], target[64];
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(link, sizeof link, "/proc/%s/ns/pid", e->d_name);
		ssize_t k = readlink(link, target, sizeof target - 1);
		if (k <= 0)
			continue;
		target[k] = '\0';
		if (strcmp(target, ns) == 0)
			n++;
	}
	closedir(dir);
	return n;
}

static void test_watchdog_kills_everything(void **state)
{
	(void)state;
	NEED_LAYER(SANDBOX_PID_NS);
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct sandbox sb;
	struct ca_run_result fate;
	struct ca_diag d;
	char link[64], ns[64], *line = NULL;
	base_opts(&o, b, 1);
	o.disable = SANDBOX_BIT(SANDBOX_SECCOMP); /* (the shell forks) */
	/* a grandchild that would outlive a plain kill of the child, and a child that ignores
	 * stdin EOF and sleeps "forever" */
	const char *sh[] = {"/bin/sh", "-c", "sleep 100 & sleep 100 & echo started; wait", NULL};
	assert_int_equal(sandbox_spawn(&sb, sh, &o, NULL, &d), 0);
	assert_int_equal(ca_child_read_line(&sb.child, 4096, 10, &line, &d), 0);
	assert_string_equal(line, "started");
	free(line);
	snprintf(link, sizeof link, "/proc/%d/ns/pid", (int)sb.child.pid);
	ssize_t k = readlink(link, ns, sizeof ns - 1);
	assert_true(k > 0);
	ns[k] = '\0';
	assert_int_equal(count_in_ns(ns), 3); /* sh + two sleeps */
	/* it does not end by itself */
	assert_int_equal(ca_child_read_line(&sb.child, 4096, 0.3, &line, &d), CA_ERR_TIMEOUT);
	double t0 = ca_now();
	sandbox_finish(&sb, 0.2, &fate);
	assert_true(fate.timed_out);
	assert_true(ca_now() - t0 < 3);
	/* the namespace died with its init: no process is left in it */
	assert_int_equal(count_in_ns(ns), 0);
	assert_int_equal(sb.child.pid, -1);
}

/* ---- scratch directories ------------------------------------------------------------------------
 */

/* Whether the list names `path` among its first entries. */
static bool named(const struct sandbox_scratch_list *l, const char *path)
{
	for (size_t i = 0; i < l->found && i < SANDBOX_SCRATCH_NAMED; i++)
		if (strcmp(l->named[i], path) == 0)
			return true;
	return false;
}

/* /tmp and /dev/shm bound from the caller's directories: what the program writes there is on
 * the host afterwards, and sandbox_scratch_check() reports it; the mount point the sandbox
 * makes there for a bind (the helper's directory lies under /tmp) is not reported. */
static void test_scratch(void **state)
{
	(void)state;
	NEED_LAYER(SANDBOX_FILESYSTEM);
	char stmp[PATH_MAX], sshm[PATH_MAX], outside[PATH_MAX], file[PATH_MAX], skel[PATH_MAX];
	char out[4096], list[1024], *text = NULL;
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct sandbox sb;
	struct sandbox_scratch_list l;
	struct ca_run_result fate;
	struct ca_diag d;
	struct stat st;
	size_t found = 99, len = 0;

	tmp_path(stmp, sizeof stmp, "scratch-tmp");
	tmp_path(sshm, sizeof sshm, "scratch-shm");
	tmp_path(outside, sizeof outside, "outside");
	assert_int_equal(mkdir(stmp, 0700), 0);
	assert_int_equal(mkdir(sshm, 0700), 0);
	assert_int_equal(ca_mkdirs(outside, 0755, &d), 0);
	assert_int_equal(ca_path_join(file, sizeof file, outside, "a"), 0);
	write_text(file, "a\n");
	assert_int_equal(ca_path_join(file, sizeof file, outside, "b"), 0);
	write_text(file, "b\n");
	base_opts(&o, b, 1);
	o.tmp_dir = stmp;
	o.shm_dir = sshm;

	/* an honest program: nothing to report */
	const char *honest[] = {"pid", "ls", "/tmp", NULL};
	const char *argv_h[] = {helper, honest[0], honest[1], honest[2], NULL};
	assert_int_equal(run_sb_keep(&o, argv_h, out, sizeof out, 20, &fate, &sb, &d), 0);
	assert_int_equal(fate.exit_code, 0);
	assert_non_null(strstr(sb.report.layer[SANDBOX_FILESYSTEM].detail, "scratch"));
	assert_string_equal(sb.scratch[0], stmp);
	assert_string_equal(sb.scratch[1], sshm);
	assert_int_equal(sandbox_scratch_check(&sb, &found, list, sizeof list, &d), 0);
	if (found)
		fail_msg("an honest run reported: %s", list);
	assert_string_equal(list, "");
	/* ... although the sandbox made the helper's mount point in scratch-tmp (so the test
	 * exercises the exemption), and the directories were handed to the program's uid */
	assert_int_equal(snprintf(skel, sizeof skel, "%s%s", stmp, bindir + 4) > 0, 1);
	assert_true(ca_is_dir(skel));
	assert_int_equal(stat(stmp, &st), 0);
	assert_int_equal(st.st_uid, geteuid() == 0 ? 65534u : (unsigned)geteuid());

	/* files in /tmp and /dev/shm, a directory, a symlink to a host directory */
	const char *argv_w[] = {helper,  "write",    "/tmp/x",      "mkdir",     "/dev/shm/d",
				"write", "/dev/shm/d/y", "symlink", outside,     "/tmp/link",
				"read",  "/tmp/x",   NULL};
	assert_int_equal(run_sb_keep(&o, argv_w, out, sizeof out, 20, &fate, &sb, &d), 0);
	assert_non_null(strstr(out, "write /tmp/x ok\n"));
	assert_non_null(strstr(out, "write /dev/shm/d/y ok\n"));
	assert_non_null(strstr(out, "symlink /tmp/link ok\n"));
	assert_non_null(strstr(out, "read /tmp/x ok data\n"));
	/* visible on the host */
	assert_int_equal(ca_path_join(file, sizeof file, stmp, "x"), 0);
	assert_int_equal(ca_read_file(file, 64, &text, &len, &d), 0);
	assert_string_equal(text, "data\n");
	free(text);
	assert_int_equal(sandbox_scratch_check(&sb, &found, list, sizeof list, &d), 0);
	assert_int_equal(found, 4);
	assert_non_null(strstr(list, " and 1 more"));
	assert_null(strstr(list, "ca-test-")); /* the mount point is not named */
	/* per directory: the symlink is one entry, its target's two files are not looked at */
	memset(&l, 0, sizeof l);
	assert_int_equal(sandbox_scratch_list(stmp, "/tmp", sb.mount_points, sb.mount_points_len,
					      NULL, &l, &d),
			 0);
	assert_int_equal(l.found, 2);
	assert_true(named(&l, "/tmp/x"));
	assert_true(named(&l, "/tmp/link"));
	assert_false(l.incomplete);
	memset(&l, 0, sizeof l);
	assert_int_equal(sandbox_scratch_list(sshm, "/dev/shm", sb.mount_points,
					      sb.mount_points_len, NULL, &l, &d),
			 0);
	assert_int_equal(l.found, 2);
	assert_true(named(&l, "/dev/shm/d"));
	assert_true(named(&l, "/dev/shm/d/y"));
	/* without the mount points, the sandbox's own entries would be reported: the exemption
	 * is what keeps the honest run clean */
	memset(&l, 0, sizeof l);
	assert_int_equal(sandbox_scratch_list(stmp, "/tmp", NULL, 0, NULL, &l, &d), 0);
	assert_true(l.found >= 4);

	/* bad scratch directories */
	o.tmp_dir = "relative";
	assert_int_equal(sandbox_spawn(&sb, argv_h, &o, NULL, &d), CA_ERR_INVALID);
	o.tmp_dir = "/nonexistent/scratch";
	assert_int_equal(sandbox_spawn(&sb, argv_h, &o, NULL, &d), CA_ERR_NOTFOUND);
	o.tmp_dir = stmp;
	assert_int_equal(ca_path_join(file, sizeof file, outside, "a"), 0);
	o.shm_dir = file;
	assert_int_equal(sandbox_spawn(&sb, argv_h, &o, NULL, &d), CA_ERR_INVALID);
	assert_int_equal(sb.child.pid, -1);
}

static void make_file(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX];
	int fd;
	assert_int_equal(ca_path_join(path, sizeof path, dir, name), 0);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void make_dir(const char *dir, const char *name)
{
	char path[PATH_MAX];
	assert_int_equal(ca_path_join(path, sizeof path, dir, name), 0);
	assert_int_equal(mkdir(path, 0755), 0);
}

/* The walk alone, on a tree made here: symlinks, depth and entry caps, the mount point
 * exemption, the allowlist, an unreadable directory, and the one-line list. */
static void test_scratch_list(void **state)
{
	(void)state;
	char root[PATH_MAX], outside[PATH_MAX], link[PATH_MAX], chain[PATH_MAX], many[PATH_MAX];
	char list[1024];
	/* what the sandbox would have made: a file bind and a directory bind under /tmp/mp/a, a
	 * file bind at /tmp/mp2/file */
	static const char mps[] = "/tmp/mp/a/plan.json\0/tmp/mp/a/work\0/tmp/mp2/file";
	static const char *const allow[] = {"/tmp/cuda.shm.*", NULL};
	struct sandbox_scratch_list l;
	struct sandbox fake;
	struct ca_diag d;
	size_t found = 0;

	tmp_path(root, sizeof root, "walk");
	tmp_path(outside, sizeof outside, "walk-outside");
	assert_int_equal(mkdir(root, 0700), 0);
	assert_int_equal(mkdir(outside, 0700), 0);
	make_file(outside, "secret1", "s");
	make_file(outside, "secret2", "s");
	make_file(root, "f1", "x");
	assert_int_equal(ca_path_join(link, sizeof link, root, "ln"), 0);
	assert_int_equal(symlink(outside, link), 0);
	/* a chain of 20 directories with a file at the bottom */
	snprintf(chain, sizeof chain, "%s", root);
	for (int i = 0; i < 20; i++) {
		char name[16], next[PATH_MAX];
		snprintf(name, sizeof name, "c%d", i);
		make_dir(chain, name);
		assert_int_equal(ca_path_join(next, sizeof next, chain, name), 0);
		memcpy(chain, next, sizeof chain);
	}
	make_file(chain, "bottom", "x");
	make_dir(root, "mp");
	assert_int_equal(snprintf(chain, sizeof chain, "%s/mp", root) > 0, 1);
	make_dir(chain, "a");
	assert_int_equal(snprintf(chain, sizeof chain, "%s/mp/a", root) > 0, 1);
	make_file(chain, "plan.json", "");
	make_dir(chain, "work");
	make_file(chain, "extra", "x"); /* next to mount points: the program's */
	make_dir(root, "mp2");
	assert_int_equal(snprintf(chain, sizeof chain, "%s/mp2", root) > 0, 1);
	make_file(chain, "file", "not empty: the program wrote it");
	make_file(root, "cuda.shm.1", "x");
	make_dir(root, "cuda.shm.dir");
	assert_int_equal(snprintf(chain, sizeof chain, "%s/cuda.shm.dir", root) > 0, 1);
	make_file(chain, "inner", "x");

	/* f1, ln, c0..c15 (16 levels; c15 not descended), mp/a/extra, mp2/file */
	memset(&l, 0, sizeof l);
	assert_int_equal(sandbox_scratch_list(root, "/tmp", mps, sizeof mps, allow, &l, &d), 0);
	assert_int_equal(l.found, 20);
	assert_true(l.incomplete); /* the chain goes deeper than the cap */
	/* the symlink's target was not entered */
	assert_true(l.visited < 40);
	/* without the allowlist: cuda.shm.1, cuda.shm.dir and its file too */
	memset(&l, 0, sizeof l);
	assert_int_equal(sandbox_scratch_list(root, "/tmp", mps, sizeof mps, NULL, &l, &d), 0);
	assert_int_equal(l.found, 23);
	/* without the mount points: mp, mp/a, plan.json, work and mp2 too */
	memset(&l, 0, sizeof l);
	assert_int_equal(sandbox_scratch_list(root, "/tmp", NULL, 0, allow, &l, &d), 0);
	assert_int_equal(l.found, 25);
	/* the same tree shown elsewhere: the mount points no longer match */
	memset(&l, 0, sizeof l);
	assert_int_equal(sandbox_scratch_list(root, "/dev/shm", mps, sizeof mps, NULL, &l, &d), 0);
	assert_int_equal(l.found, 28);

	/* an unreadable directory (mode 000, which a program could set on its own directories)
	 * is still listed: root reads it anyway, another owner makes it readable first */
	char locked[PATH_MAX];
	assert_int_equal(ca_path_join(locked, sizeof locked, root, "mp"), 0);
	assert_int_equal(chmod(locked, 0), 0);
	memset(&l, 0, sizeof l);
	assert_int_equal(sandbox_scratch_list(root, "/tmp", mps, sizeof mps, allow, &l, &d), 0);
	assert_int_equal(l.found, 20);
	assert_int_equal(chmod(locked, 0755), 0);

	/* the entry cap */
	tmp_path(many, sizeof many, "many");
	assert_int_equal(mkdir(many, 0700), 0);
	for (int i = 0; i < SANDBOX_SCRATCH_MAX_ENTRIES + 50; i++) {
		char name[32];
		snprintf(name, sizeof name, "f%d", i);
		make_file(many, name, "");
	}
	memset(&l, 0, sizeof l);
	assert_int_equal(sandbox_scratch_list(many, "/dev/shm", NULL, 0, NULL, &l, &d), 0);
	assert_int_equal(l.found, SANDBOX_SCRATCH_MAX_ENTRIES);
	assert_int_equal(l.visited, SANDBOX_SCRATCH_MAX_ENTRIES);
	assert_true(l.incomplete);
	assert_int_equal(strncmp(l.named[0], "/dev/shm/f", 10), 0);

	/* the one-line list: three names, then a count */
	memset(&fake, 0, sizeof fake);
	snprintf(fake.scratch[1], sizeof fake.scratch[1], "%s", many);
	assert_int_equal(sandbox_scratch_check(&fake, &found, list, sizeof list, &d), 0);
	assert_int_equal(found, SANDBOX_SCRATCH_MAX_ENTRIES);
	int commas = 0;
	for (const char *c = list; (c = strstr(c, ", /dev/shm/f")); c++)
		commas++;
	assert_int_equal(commas, 2);
	assert_non_null(strstr(list, " and 9997 more (not all listed)"));
	/* nothing there, or no scratch directory: nothing to say */
	memset(&fake, 0, sizeof fake);
	assert_int_equal(sandbox_scratch_check(&fake, &found, list, sizeof list, &d), 0);
	assert_int_equal(found, 0);
	assert_string_equal(list, "");
	snprintf(fake.scratch[0], sizeof fake.scratch[0], "%s", outside);
	assert_int_equal(chmod(outside, 0755), 0);
	assert_int_equal(sandbox_scratch_check(&fake, &found, list, sizeof list, &d), 0);
	assert_int_equal(found, 2);
	/* a scratch directory that is gone is an error, not "nothing there" */
	assert_int_equal(ca_path_join(fake.scratch[0], sizeof fake.scratch[0], root, "nonexistent"),
			 0);
	assert_int_equal(sandbox_scratch_check(&fake, &found, list, sizeof list, &d), CA_ERR_IO);
}

/* ---- fallback, errors, strictness, cgroups ------------------------------------------------------
 */

static void test_without_user_namespace(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		printf("  skipped: namespaces without a user namespace need root\n");
		skip();
	}
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct ca_run_result fate;
	struct sandbox_report rep;
	struct ca_diag d;
	char out[4096];
	base_opts(&o, b, 1);
	o.disable = SANDBOX_BIT(SANDBOX_USER_NS);
	o.nproc = 16;
	/* the filter (and its exec rule) works the same: the first fork is the end */
	const char *argv_k[] = {helper, "pid", "rawfork", NULL};
	assert_int_equal(run_sb(&o, argv_k, out, sizeof out, 20, &fate, &rep, &d), 0);
	assert_true(rep.layer[SANDBOX_SECCOMP].on);
	assert_non_null(strstr(out, "pid 1 ppid 0 procs 1"));
	assert_int_equal(fate.term_signal, SIGSYS);
	/* without it, RLIMIT_NPROC still bounds a fork loop */
	o.disable |= SANDBOX_BIT(SANDBOX_SECCOMP);
	const char *argv[] = {helper, "pid", "status", "write", "/usr/x", "fork", "1000", NULL};
	assert_int_equal(run_sb(&o, argv, out, sizeof out, 20, &fate, &rep, &d), 0);
	assert_false(rep.layer[SANDBOX_USER_NS].on);
	assert_string_equal(rep.layer[SANDBOX_USER_NS].detail, "disabled by the caller");
	for (int l = SANDBOX_MOUNT_NS; l <= SANDBOX_UTS_NS; l++)
		assert_true(rep.layer[l].on);
	assert_true(rep.layer[SANDBOX_FILESYSTEM].on);
	assert_true(rep.layer[SANDBOX_CAPS].on);
	assert_non_null(strstr(out, "pid 1 ppid 0 procs 1\n"));
	assert_non_null(strstr(out, "[Uid: 65534 65534 65534 65534]"));
	assert_non_null(strstr(out, "[CapEff: 0000000000000000]"));
	assert_non_null(strstr(out, "[CapBnd: 0000000000000000]"));
	assert_non_null(strstr(out, "write /usr/x EROFS\n"));
	/* RLIMIT_NPROC counts the host uid's processes here; still bounded */
	int n = -1;
	const char *f = strstr(out, "fork ");
	assert_non_null(f);
	assert_int_equal(sscanf(f, "fork %d", &n), 1);
	assert_true(n < 16);
}

/* pass_fds: the given descriptors arrive at 3, 4, ... and nothing else of the caller's does */
static void test_passed_descriptors(void **state)
{
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct ca_run_result fate;
	struct ca_diag d = {{0}};
	char out[4096];
	int fds[2];
	(void)state;
	fds[0] = memfd_create("pass-test", MFD_CLOEXEC);
	fds[1] = memfd_create("pass-test-2", MFD_CLOEXEC);
	assert_true(fds[0] >= 0 && fds[1] >= 0);
	assert_int_equal(write(fds[0], "slot-zero", 9), 9);
	int stray = open("/dev/null", O_RDONLY); /* not passed: must not reach the program */
	assert_true(stray >= 0);
	base_opts(&o, b, 1);
	o.pass_fds = fds;
	o.n_pass_fds = 2;
	const char *cmds[] = {"passed", NULL};
	if (run_helper(&o, cmds, out, sizeof out, &fate, &d) != 0)
		fail_msg("%s", d.msg);
	if (!strstr(out, "passed 2 fd3 slot-zero"))
		fail_msg("passed descriptors: %s", out);
	o.n_pass_fds = 0;
	assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), 0);
	if (!strstr(out, "passed 0 fd3 EBADF"))
		fail_msg("no passed descriptors: %s", out);
	o.n_pass_fds = SANDBOX_MAX_PASS_FDS + 1;
	assert_int_equal(run_helper(&o, cmds, out, sizeof out, &fate, &d), CA_ERR_LIMIT);
	close(stray);
	close(fds[0]);
	close(fds[1]);
}

static void test_errors(void **state)
{
	(void)state;
	struct sandbox_bind b[2];
	struct sandbox_opts o;
	struct sandbox sb;
	struct ca_run_result fate;
	struct ca_diag d;
	char out[4096], closed[PATH_MAX];

	base_opts(&o, b, 2);
	const char *rel[] = {"bin/helper", NULL};
	assert_int_equal(sandbox_spawn(&sb, rel, &o, NULL, &d), CA_ERR_INVALID);
	assert_int_equal(sb.child.pid, -1);

	b[1] = (struct sandbox_bind){.src = "/nonexistent/sbx"};
	const char *argv[] = {helper, NULL};
	assert_int_equal(sandbox_spawn(&sb, argv, &o, NULL, &d), CA_ERR_NOTFOUND);
	assert_non_null(strstr(d.msg, "/nonexistent/sbx"));
	b[1] = (struct sandbox_bind){.src = "relative/path"};
	assert_int_equal(sandbox_spawn(&sb, argv, &o, NULL, &d), CA_ERR_INVALID);
	b[1] = (struct sandbox_bind){.src = "/tmp/../etc"};
	assert_int_equal(sandbox_spawn(&sb, argv, &o, NULL, &d), CA_ERR_INVALID);
	/* an optional missing source is skipped */
	b[1] = (struct sandbox_bind){.src = "/nonexistent/sbx", .optional = true};
	assert_int_equal(run_sb(&o, argv, out, sizeof out, 10, &fate, NULL, &d), 0);
	assert_string_equal(out, "end");

	if (!layer_on(SANDBOX_FILESYSTEM)) {
		printf("  skipped (in part): no filesystem layer here\n");
		return;
	}
	/* a program that is not bound: the exec error comes back as one line */
	o.n_binds = 0;
	assert_int_equal(sandbox_spawn(&sb, argv, &o, NULL, &d), CA_ERR_CHILD);
	assert_non_null(strstr(d.msg, "sandbox: cannot execute"));
	assert_non_null(strstr(d.msg, "No such file or directory"));
	assert_null(strchr(d.msg, '\n'));
	assert_int_equal(sb.child.pid, -1);
	/* a bind the program's uid cannot read */
	if (geteuid() == 0) {
		tmp_path(closed, sizeof closed, "closed");
		assert_int_equal(ca_mkdirs(closed, 0700, &d), 0);
		chmod(closed, 0700);
		o.n_binds = 2;
		b[1] = (struct sandbox_bind){.src = closed};
		assert_int_equal(sandbox_spawn(&sb, argv, &o, NULL, &d), CA_ERR_CHILD);
		assert_non_null(strstr(d.msg, "sandbox: cannot use the bind"));
		assert_non_null(strstr(d.msg, "Permission denied"));
		/* writable: handed to the program's uid, then fine */
		b[1].writable = true;
		assert_int_equal(run_sb(&o, argv, out, sizeof out, 10, &fate, NULL, &d), 0);
		struct stat st;
		assert_int_equal(stat(closed, &st), 0);
		assert_int_equal(st.st_uid, 65534);
	}
}

static void test_strict(void **state)
{
	(void)state;
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct ca_run_result fate;
	struct sandbox_report rep;
	struct ca_diag d;
	char out[4096];
	bool all_but_cgroup = true;
	for (int l = 0; l < SANDBOX_N_LAYERS; l++)
		if (l != SANDBOX_CGROUP && !layer_on((enum sandbox_layer)l))
			all_but_cgroup = false;
	base_opts(&o, b, 1);
	o.strict = true;
	const char *argv[] = {helper, NULL};
	int rc = run_sb(&o, argv, out, sizeof out, 10, &fate, &rep, &d);
	if (!layer_on(SANDBOX_CGROUP)) {
		assert_int_equal(rc, CA_ERR_UNSUPPORTED);
		assert_non_null(strstr(d.msg, "cgroup (cgroup v2 not available"));
	}
	if (!all_but_cgroup) {
		printf("  skipped (in part): layers other than the cgroup are off here\n");
		return;
	}
	/* everything else is on here: strict without the cgroup succeeds */
	o.disable = SANDBOX_BIT(SANDBOX_CGROUP);
	assert_int_equal(run_sb(&o, argv, out, sizeof out, 10, &fate, &rep, &d), 0);
	assert_string_equal(out, "end");
	assert_string_equal(rep.layer[SANDBOX_CGROUP].detail, "disabled by the caller");
}

static void test_cgroup_limits(void **state)
{
	(void)state;
	if (!layer_on(SANDBOX_CGROUP)) {
		printf("  skipped: %s\n",
		       probe_ok ? probe.layer[SANDBOX_CGROUP].detail : "no probe");
		skip();
	}
	struct sandbox_bind b[1];
	struct sandbox_opts o;
	struct sandbox sb;
	struct ca_run_result fate;
	struct ca_diag d;
	char file[PATH_MAX + 32], *text = NULL, *line = NULL, cg[PATH_MAX];
	size_t len;
	base_opts(&o, b, 1);
	o.memory_max = 256u << 20;
	o.pids_max = 64;
	const char *argv[] = {"/bin/sh", "-c", "echo up; read x", NULL};
	assert_int_equal(sandbox_spawn(&sb, argv, &o, NULL, &d), 0);
	assert_int_equal(ca_child_read_line(&sb.child, 4096, 10, &line, &d), 0);
	free(line);
	snprintf(cg, sizeof cg, "%s", sb.cgroup);
	snprintf(file, sizeof file, "%s/memory.max", cg);
	assert_int_equal(ca_read_file(file, 64, &text, &len, &d), 0);
	assert_string_equal(text, "268435456\n");
	free(text);
	snprintf(file, sizeof file, "%s/cgroup.procs", cg);
	assert_int_equal(ca_read_file(file, 4096, &text, &len, &d), 0);
	assert_int_equal(atoi(text), sb.child.pid);
	free(text);
	sandbox_finish(&sb, 0.2, &fate);
	assert_false(ca_is_dir(cg));
}

static void test_seccomp_filter_builds(void **state)
{
	(void)state;
	struct sock_filter *f = NULL;
	unsigned short len = 0;
	int rules = 0;
	struct ca_diag d;
	int rules_pinned = 0;
	assert_int_equal(sandbox_seccomp_build(0, &f, &len, &rules, &d), 0);
	assert_non_null(f);
	assert_true(len > 10);
	assert_true(rules >= 30);
	free(f);
	/* with the exec pointer pinned: one more rule (execve) */
	assert_int_equal(sandbox_seccomp_build(0x7f0000001000ull, &f, &len, &rules_pinned, &d), 0);
	assert_int_equal(rules_pinned, rules + 1);
	free(f);
	/* allow_processes (a shell): fork, vfork, execveat and clone-without-CLONE_THREAD are
	 * not killed (4 rules fewer), and a pinned exec pointer makes no sense with it */
	int rules_proc = 0;
	assert_int_equal(sandbox_seccomp_build_opts(0, true, &f, &len, &rules_proc, &d), 0);
	assert_int_equal(rules_proc, rules - 4);
	free(f);
	f = NULL;
	assert_int_equal(sandbox_seccomp_build_opts(0x7f0000001000ull, true, &f, &len,
						    &rules_proc, &d),
			 CA_ERR_INVALID);
	assert_null(f);
	/* the seccomp_wx rules: ten more (W+X for mmap, mprotect and pkey_mprotect, shmat, memfd,
	 * memfd_secret, two for mremap, remap_file_pages, personality), counted apart; two more
	 * again (mprotect and pkey_mprotect with PROT_EXEC) for a program without MDWE */
	struct sandbox_seccomp_spec spec = {.wx = true};
	int rules_wx = 0, wx = -1, rules_wx2 = 0, wx2 = -1;
	assert_int_equal(sandbox_seccomp_build_spec(&spec, &f, &len, &rules_wx, &wx, &d), 0);
	assert_int_equal(wx, 10);
	assert_int_equal(rules_wx, rules + wx);
	free(f);
	spec.wx_mprotect_exec = true;
	assert_int_equal(sandbox_seccomp_build_spec(&spec, &f, &len, &rules_wx2, &wx2, &d), 0);
	assert_int_equal(wx2, wx + 2);
	assert_int_equal(rules_wx2, rules_wx + 2);
	free(f);
	/* without wx the spec is build_opts */
	spec = (struct sandbox_seccomp_spec){.allow_processes = true};
	assert_int_equal(sandbox_seccomp_build_spec(&spec, &f, &len, &rules_wx, NULL, &d), 0);
	assert_int_equal(rules_wx, rules - 4);
	free(f);
}

/* ---- W^X: seccomp_wx, mdwe, noexec, landlock --------------------------------------------------
 */

/* Skips the calling test where the W^X helper was not built (its machine code is x86-64). */
#define NEED_WX()                                                                          \
	do {                                                                               \
		if (!wx_helper[0]) {                                                       \
			printf("  skipped: the W^X helper's machine code is x86-64 only\n"); \
			skip();                                                            \
		}                                                                          \
	} while (0)

/* One attack (or honest run) of the W^X helper and its expected outcome: `expect` NULL means
 * "killed by the seccomp filter at the attack"; otherwise a line the output must hold (with
 * "executed 42" when the route is expected to work because the layers that stop it are off).
 * `after`: then call the original code again, which must still return 7. */
struct wx_case {
	const char *cmd, *arg, *expect;
	bool after;
};

/* Runs each case alone (a kill ends the program) with `o` and checks its outcome. */
static void wx_check(const struct sandbox_opts *o, const struct wx_case *cases, size_t n,
		     const char *what)
{
	for (size_t i = 0; i < n; i++) {
		const struct wx_case *c = &cases[i];
		const char *argv[8] = {wx_helper, "selfcode", c->cmd};
		size_t k = 3;
		struct ca_run_result fate;
		struct ca_diag d;
		char out[4096];
		if (c->arg)
			argv[k++] = c->arg;
		if (c->after)
			argv[k++] = "selfcode";
		argv[k] = NULL;
		if (run_sb(o, argv, out, sizeof out, 20, &fate, NULL, &d) != 0)
			fail_msg("%s, %s: spawn: %s", what, c->cmd, d.msg);
		/* it ran up to the attack */
		if (strncmp(out, "selfcode 7", 10) != 0)
			fail_msg("%s, %s: did not start: %s", what, c->cmd, out);
		if (!c->expect) {
			struct sandbox fake;
			memset(&fake, 0, sizeof fake);
			fake.report.layer[SANDBOX_SECCOMP].on = true;
			if (fate.term_signal != SIGSYS || strstr(out, "executed") ||
			    strstr(out, "\nend"))
				fail_msg("%s, %s: expected a seccomp kill, got signal %d exit %d: %s",
					 what, c->cmd, fate.term_signal, fate.exit_code, out);
			assert_true(sandbox_killed_by_seccomp(&fake, &fate));
			continue;
		}
		bool ok = fate.term_signal == 0 && fate.exit_code == 0 && strstr(out, c->expect) &&
			  strstr(out, "\nend") &&
			  (strstr(c->expect, "executed") || !strstr(out, "executed"));
		if (ok && c->after)
			ok = strstr(strstr(out, c->expect), "\nselfcode 7\n") != NULL;
		if (!ok)
			fail_msg("%s, %s: expected \"%s\"%s, got signal %d exit %d: %s", what, c->cmd,
				 c->expect, c->after ? " and the code unchanged" : "",
				 fate.term_signal, fate.exit_code, out);
	}
}

/* Options as the supervisor starts the worker (src/eval/eval.c, spawn_candidate): the
 * program's directory, a writable work/ directory, and, with stmp/sshm, the run's scratch
 * directories at /tmp and /dev/shm instead of the private tmpfs. Without the GPU nodes (also
 * on a GPU host, where they would leave /proc writable: sandbox.h, "landlock"). */
static void wx_opts(struct sandbox_opts *o, struct sandbox_bind *b, const char *work,
		    const char *stmp, const char *sshm)
{
	base_opts(o, b, 2);
	b[1] = (struct sandbox_bind){.src = work, .writable = true};
	o->tmp_dir = stmp;
	o->shm_dir = sshm;
	o->no_gpu = true;
}

/* Fresh work/ and scratch directories under the test's directory, named with `tag`. */
static void wx_dirs(const char *tag, char *work, char *stmp, char *sshm, char *file,
		    size_t size)
{
	char name[64];
	struct ca_diag d;
	snprintf(name, sizeof name, "%s-work", tag);
	tmp_path(work, size, name);
	snprintf(name, sizeof name, "%s-stmp", tag);
	tmp_path(stmp, size, name);
	snprintf(name, sizeof name, "%s-sshm", tag);
	tmp_path(sshm, size, name);
	assert_int_equal(ca_mkdirs(work, 0755, &d), 0);
	assert_int_equal(ca_mkdirs(stmp, 0700, &d), 0);
	assert_int_equal(ca_mkdirs(sshm, 0700, &d), 0);
	assert_int_equal(ca_path_join(file, size, work, "wx.bin"), 0);
}

/* Every route with every layer on: each one is killed by the filter or refused with an errno,
 * and the original code still runs. */
static void test_wx_attacks(void **state)
{
	(void)state;
	NEED_WX();
	NEED_LAYER(SANDBOX_SECCOMP_WX);
	NEED_LAYER(SANDBOX_MDWE);
	NEED_LAYER(SANDBOX_NOEXEC);
	NEED_LAYER(SANDBOX_LANDLOCK);
	char work[PATH_MAX], stmp[PATH_MAX], sshm[PATH_MAX], file[PATH_MAX], exp[PATH_MAX + 64];
	struct sandbox_bind b[2];
	struct sandbox_opts o;
	wx_dirs("wxa", work, stmp, sshm, file, sizeof file);
	snprintf(exp, sizeof exp, "fileexec %s mmap EPERM", file);
	const struct wx_case cases[] = {
		/* (a) a page both writable and executable */
		{"rwx", NULL, NULL, false},
		/* (b) code made writable and executable at once, or RX -> RW (patch) -> RX: MDWE
		 * refuses the last step (the page stays RW, so the patch never runs) */
		{"patchrwx", NULL, NULL, false},
		{"patch", NULL, "patch rx EACCES", false},
		/* (c) machine code written to a memfd, or to a file in any writable place, then
		 * mapped executable */
		{"memfd", NULL, NULL, false},
		{"fileexec", "/tmp/wx.bin", "fileexec /tmp/wx.bin mmap EPERM", false},
		{"fileexec", "/dev/shm/wx.bin", "fileexec /dev/shm/wx.bin mmap EPERM", false},
		{"fileexec", file, exp, false},
		/* (d) a write through /proc/self/mem (it ignores page protections) */
		{"procmem", NULL, "procmem open EACCES", true},
		/* (e) System V shared memory attached writable and executable */
		{"shmexec", NULL, NULL, false},
		/* a shared mapping duplicated (one view RX, one RW); READ_IMPLIES_EXEC */
		{"mremapdup", NULL, NULL, false},
		{"personality", NULL, NULL, false},
	};
	/* as the worker runs: scratch directories at /tmp and /dev/shm */
	wx_opts(&o, b, work, stmp, sshm);
	wx_check(&o, cases, sizeof cases / sizeof cases[0], "scratch directories");
	/* the private tmpfs at /tmp and /dev/shm */
	wx_opts(&o, b, work, NULL, NULL);
	wx_check(&o, cases + 4, 3, "private tmpfs");
}

/* Each layer on its own: with one switched off, the others still stop what they cover, and
 * with the ones covering a route switched off, the route works (so the checks above can fail).
 */
static void test_wx_each_layer(void **state)
{
	(void)state;
	NEED_WX();
	NEED_LAYER(SANDBOX_SECCOMP_WX);
	NEED_LAYER(SANDBOX_MDWE);
	NEED_LAYER(SANDBOX_NOEXEC);
	NEED_LAYER(SANDBOX_LANDLOCK);
	char work[PATH_MAX], stmp[PATH_MAX], sshm[PATH_MAX], file[PATH_MAX], exp[PATH_MAX + 64];
	struct sandbox_bind b[2];
	struct sandbox_opts o;
	struct sandbox_report rep;
	struct ca_run_result fate;
	struct ca_diag d;
	char out[4096];
	wx_dirs("wxe", work, stmp, sshm, file, sizeof file);

	/* seccomp_wx off: MDWE refuses W+X and exec gain (also READ_IMPLIES_EXEC's W+X), landlock
	 * /proc/self/mem; memfd, System V and mremap aliases are only the filter's to stop */
	const struct wx_case no_filter[] = {
		{"rwx", NULL, "rwx mmap EACCES", false},
		{"patchrwx", NULL, "patchrwx rw EACCES", true},
		{"patch", NULL, "patch rx EACCES", false},
		{"personality", NULL, "personality mmap EACCES", false},
		{"procmem", NULL, "procmem open EACCES", true},
		{"memfd", NULL, "memfd executed 42", false},
		{"shmexec", NULL, "shmexec executed 42", false},
		{"mremapdup", NULL, "mremapdup executed 42", false},
	};
	wx_opts(&o, b, work, stmp, sshm);
	o.disable = SANDBOX_BIT(SANDBOX_SECCOMP_WX);
	wx_check(&o, no_filter, sizeof no_filter / sizeof no_filter[0], "seccomp_wx off");

	/* MDWE off: the filter kills every mprotect(PROT_EXEC) instead, and says so */
	const struct wx_case no_mdwe[] = {
		{"rwx", NULL, NULL, false},
		{"patch", NULL, NULL, false},
		{"personality", NULL, NULL, false},
	};
	o.disable = SANDBOX_BIT(SANDBOX_MDWE);
	wx_check(&o, no_mdwe, sizeof no_mdwe / sizeof no_mdwe[0], "mdwe off");
	const char *argv[] = {wx_helper, "selfcode", NULL};
	assert_int_equal(run_sb(&o, argv, out, sizeof out, 20, &fate, &rep, &d), 0);
	assert_false(rep.layer[SANDBOX_MDWE].on);
	assert_true(rep.layer[SANDBOX_SECCOMP_WX].on);
	assert_non_null(strstr(rep.layer[SANDBOX_SECCOMP_WX].detail, "any mprotect(PROT_EXEC)"));

	/* both off: patching code and W+X pages work */
	const struct wx_case neither[] = {
		{"rwx", NULL, "rwx executed 42", false},
		{"patchrwx", NULL, "patchrwx executed 42", false},
		{"patch", NULL, "patch executed 42", false},
		{"personality", NULL, "personality executed 42", false},
	};
	o.disable = SANDBOX_BIT(SANDBOX_MDWE) | SANDBOX_BIT(SANDBOX_SECCOMP_WX);
	wx_check(&o, neither, sizeof neither / sizeof neither[0], "seccomp_wx and mdwe off");

	/* noexec off: a file written to /tmp, /dev/shm or work/ runs */
	snprintf(exp, sizeof exp, "fileexec %s executed 42", file);
	const struct wx_case no_noexec[] = {
		{"fileexec", "/tmp/wx.bin", "fileexec /tmp/wx.bin executed 42", false},
		{"fileexec", "/dev/shm/wx.bin", "fileexec /dev/shm/wx.bin executed 42", false},
		{"fileexec", file, exp, false},
	};
	o.disable = SANDBOX_BIT(SANDBOX_NOEXEC);
	wx_check(&o, no_noexec, 3, "noexec off, scratch directories");
	wx_opts(&o, b, work, NULL, NULL);
	o.disable = SANDBOX_BIT(SANDBOX_NOEXEC);
	wx_check(&o, no_noexec, 2, "noexec off, private tmpfs");

	/* landlock off: /proc/self/mem writes into the code page (FOLL_FORCE), whatever MDWE
	 * and the filter say; a kernel built to refuse forced writes refuses it instead */
	const char *argv_pm[] = {wx_helper, "selfcode", "procmem", NULL};
	o.disable = SANDBOX_BIT(SANDBOX_LANDLOCK);
	assert_int_equal(run_sb(&o, argv_pm, out, sizeof out, 20, &fate, &rep, &d), 0);
	assert_false(rep.layer[SANDBOX_LANDLOCK].on);
	if (strstr(out, "procmem write "))
		printf("  note: this kernel refuses forced /proc/self/mem writes itself: %s\n", out);
	else if (!strstr(out, "procmem executed 42"))
		fail_msg("landlock off, procmem: %s", out);
}

/* Honest programs keep working with every layer on: the loader (dlopen of libm and of a
 * library with thread-local storage), threads, thread stacks, malloc arenas grown from threads
 * (glibc grows them with mprotect(PROT_READ|PROT_WRITE)), Python with a ctypes callback
 * (libffi's trampolines); and a shell (allow_processes) keeps JIT-friendly memory but not
 * /proc/self/mem. */
static void test_wx_honest(void **state)
{
	(void)state;
	NEED_WX();
	NEED_LAYER(SANDBOX_SECCOMP_WX);
	NEED_LAYER(SANDBOX_LANDLOCK);
	char work[PATH_MAX], stmp[PATH_MAX], sshm[PATH_MAX], file[PATH_MAX], out[4096];
	struct sandbox_bind b[2];
	struct sandbox_opts o;
	struct sandbox_report rep;
	struct ca_run_result fate;
	struct ca_diag d;
	wx_dirs("wxh", work, stmp, sshm, file, sizeof file);
	wx_opts(&o, b, work, stmp, sshm);
	const char *argv[] = {wx_helper, "selfcode", "dl", "libm.so.6", "cos", "dl", wx_lib,
			      "wxlib_answer", "arenas", "8", "stacks", "16", "selfcode", NULL};
	assert_int_equal(run_sb(&o, argv, out, sizeof out, 30, &fate, &rep, &d), 0);
	for (int l = SANDBOX_SECCOMP; l < SANDBOX_N_LAYERS; l++)
		if (!rep.layer[l].on && layer_on((enum sandbox_layer)l))
			fail_msg("%s off: %s", sandbox_layer_name((enum sandbox_layer)l),
				 rep.layer[l].detail);
	if (fate.term_signal != 0 || fate.exit_code != 0 ||
	    strcmp(out, "selfcode 7\ndl cos 1\ndl wxlib_answer 42\narenas 8 of 8\nstacks 16 of "
			"16\nselfcode 7\nend") != 0)
		fail_msg("honest run: signal %d exit %d: %s", fate.term_signal, fate.exit_code, out);

	/* Python (the PyTorch runner's language): foreign calls through ctypes (as the runner
	 * makes its CUDA driver calls), re, json, hashlib, sqlite3, threads. (Not ctypes
	 * callbacks: a libffi built without static trampolines, Debian's, maps their code W+X,
	 * which the filter kills; docs/security.md, "W^X".) */
	if (ca_is_file("/usr/bin/python3")) {
		const char *py[] = {
			"/usr/bin/python3", "-B", "-c",
			"import ctypes, re, json, hashlib, sqlite3, threading\n"
			"n = ctypes.CDLL(None).strlen(b'abcdefghijklmnopqrstuvwxyzabcdefghijklmnop')\n"
			"c = sqlite3.connect(':memory:'); c.execute('create table t (x)')\n"
			"t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
			"print('py', n, re.sub(r'\\d', 'n', 'a1'), json.dumps([1]),"
			" hashlib.sha256(b'').hexdigest()[:4])",
			NULL};
		assert_int_equal(run_sb(&o, py, out, sizeof out, 60, &fate, NULL, &d), 0);
		if (fate.term_signal != 0 || strcmp(out, "py 42 an [1] e3b0") != 0)
			fail_msg("python: signal %d exit %d: %s", fate.term_signal, fate.exit_code,
				 out);
	} else {
		printf("  skipped (in part): no /usr/bin/python3\n");
	}

	/* allow_processes (the agent's shell): seccomp_wx, mdwe and noexec are not applied (and
	 * strict does not count them), landlock is */
	wx_opts(&o, b, work, NULL, NULL);
	o.allow_processes = true;
	char script[2 * PATH_MAX];
	snprintf(script, sizeof script,
		 "%s rwx procmem fileexec /tmp/x; echo shell >/tmp/s; cat /tmp/s; "
		 "echo err >/dev/stderr && echo stderr ok",
		 wx_helper);
	const char *sh[] = {"/bin/sh", "-c", script, NULL};
	/* (reopening stderr through /dev/stderr needs the file's permission too) */
	char err_path[PATH_MAX];
	assert_int_equal(ca_path_join(err_path, sizeof err_path, tmpdir, "stderr.txt"), 0);
	close(open(err_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666));
	assert_int_equal(chmod(err_path, 0666), 0);
	assert_int_equal(run_sb(&o, sh, out, sizeof out, 20, &fate, &rep, &d), 0);
	for (int l = SANDBOX_SECCOMP_WX; l <= SANDBOX_NOEXEC; l++) {
		assert_false(rep.layer[l].on);
		assert_non_null(strstr(rep.layer[l].detail, "not applied with allow_processes"));
	}
	assert_true(rep.layer[SANDBOX_LANDLOCK].on);
	if (fate.term_signal != 0 || !strstr(out, "rwx executed 42\n") ||
	    !strstr(out, "procmem open EACCES\n") || !strstr(out, "fileexec /tmp/x executed 42\n") ||
	    !strstr(out, "\nshell\n") || !strstr(out, "stderr ok"))
		fail_msg("allow_processes: signal %d: %s", fate.term_signal, out);
	if (!layer_on(SANDBOX_CGROUP))
		o.disable = SANDBOX_BIT(SANDBOX_CGROUP);
	o.strict = true;
	const char *argv_s[] = {wx_helper, NULL};
	if (run_sb(&o, argv_s, out, sizeof out, 20, &fate, &rep, &d) != 0)
		fail_msg("strict with allow_processes: %s", d.msg);
}

/* The real GPU worker starts inside the sandbox: its binary and shared libraries (CUDA
 * runtime, CUPTI, jansson, ...) resolve through the read-only system binds, it reads its plan,
 * and it answers with a JSON event (here worker.no_gpu: CI has no GPU; on a GPU host the same
 * spawn reaches the device). Skipped where the worker was not built (no nvcc). */
static void test_gpu_worker_starts(void **state)
{
	(void)state;
	const char *b = getenv("CA_BUILD");
	char worker[PATH_MAX], plan[PATH_MAX], pub[PATH_MAX], work[PATH_MAX], out[4096];
	struct ca_run_result fate;
	struct ca_diag d;
	snprintf(worker, sizeof worker, "%s/cuda-agent-worker", b && b[0] ? b : "build");
	if (!ca_is_file(worker)) {
		printf("  skipped: %s is not built\n", worker);
		skip();
	}
	NEED_LAYER(SANDBOX_FILESYSTEM);
	char real_worker[PATH_MAX];
	assert_int_equal(ca_realpath(worker, real_worker, sizeof real_worker, &d), 0);
	tmp_path(plan, sizeof plan, "plan.json");
	tmp_path(pub, sizeof pub, "public");
	tmp_path(work, sizeof work, "work");
	assert_int_equal(ca_mkdirs(pub, 0755, &d), 0);
	assert_int_equal(ca_mkdirs(work, 0755, &d), 0);
	static const char text[] =
		"{\"version\": 2, \"library\": \"/nonexistent/candidate.so\", \"device\": 0, "
		"\"spec\": {\"outputs\": [{\"name\": \"o\", \"dtype\": \"float32\", \"shape\": [4]}]},"
		" \"slots\": {\"kind\": \"cuda\", \"params\": {\"fd\": 3, \"bytes\": 256},"
		" \"inputs\": [{\"fd\": 4, \"bytes\": 256}], \"outputs\": {\"fd\": 5, \"bytes\": 256}}}";
	assert_int_equal(ca_write_file_atomic(plan, text, sizeof text - 1, &d), 0);
	assert_int_equal(chmod(plan, 0644), 0);
	assert_int_equal(chmod(tmpdir, 0711), 0);
	struct sandbox_bind binds[] = {
		{.src = real_worker}, {.src = plan}, {.src = pub}, {.src = work, .writable = true}};
	struct sandbox_opts o = {0};
	/* as the supervisor starts it (spawn_sandboxed in src/eval/eval.c): scratch directories
	 * at /tmp and /dev/shm, the JIT cache off */
	char stmp[PATH_MAX], sshm[PATH_MAX], list[1024];
	const char *env[] = {"CUDA_CACHE_DISABLE=1", NULL};
	struct sandbox sb;
	size_t found = 0;
	tmp_path(stmp, sizeof stmp, "worker-scratch-tmp");
	tmp_path(sshm, sizeof sshm, "worker-scratch-shm");
	assert_int_equal(mkdir(stmp, 0700), 0);
	assert_int_equal(mkdir(sshm, 0700), 0);
	o.binds = binds;
	o.n_binds = 4;
	o.pass_ld_library_path = true;
	o.env = env;
	o.tmp_dir = stmp;
	o.shm_dir = sshm;
	const char *argv[] = {real_worker, plan, NULL};
	if (run_sb_keep(&o, argv, out, sizeof out, 20.0, &fate, &sb, &d) != 0)
		fail_msg("spawn: %s", d.msg);
	if (!strstr(out, "\"event\""))
		fail_msg("the worker said: %s (signal %d)", out, fate.term_signal);
	/* No GPU here: the worker must say so. On a GPU host, CUDA must come up inside the
	 * sandbox with every layer on (the worker reports the device; it ends at stdin's EOF):
	 * the CUDA driver is where a layer can break an honest run (docs/security.md, "W^X") */
	struct stat nst;
	if (stat("/dev/nvidiactl", &nst) == 0 && S_ISCHR(nst.st_mode)) {
		if (!strstr(out, "\"event\":\"device\"") || strstr(out, "worker.no_gpu"))
			fail_msg("GPU host: CUDA did not start in the sandbox: %s", out);
		assert_non_null(strstr(sb.report.layer[SANDBOX_LANDLOCK].detail, "/proc"));
	} else {
		assert_true(strstr(out, "worker.no_gpu") || strstr(out, "abi.load_failed"));
	}
	/* The seccomp filter let it (and the CUDA stack under it) start and end ... */
	assert_false(sandbox_killed_by_seccomp(&sb, &fate));
	/* ... and it left nothing in /tmp or /dev/shm: on a GPU host this is where files the
	 * driver makes there would show (then allow them in src/sandbox/scratch.c) */
	assert_int_equal(sandbox_scratch_check(&sb, &found, list, sizeof list, &d), 0);
	if (found)
		fail_msg("the worker left files in its scratch directories: %s", list);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seccomp_filter_builds),
		cmocka_unit_test(test_report_json),
		cmocka_unit_test(test_pid_namespace),
		cmocka_unit_test(test_network),
		cmocka_unit_test(test_filesystem),
		cmocka_unit_test(test_seccomp),
		cmocka_unit_test(test_scratch),
		cmocka_unit_test(test_scratch_list),
		cmocka_unit_test(test_identity_and_env),
		cmocka_unit_test(test_rlimit_fsize),
		cmocka_unit_test(test_rlimit_nproc),
		cmocka_unit_test(test_rlimit_cpu),
		cmocka_unit_test(test_watchdog_kills_everything),
		cmocka_unit_test(test_without_user_namespace),
		cmocka_unit_test(test_passed_descriptors),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_strict),
		cmocka_unit_test(test_cgroup_limits),
		cmocka_unit_test(test_gpu_worker_starts),
		cmocka_unit_test(test_wx_attacks),
		cmocka_unit_test(test_wx_each_layer),
		cmocka_unit_test(test_wx_honest),
	};
	return cmocka_run_group_tests(tests, group_setup, teardown_dir);
}
