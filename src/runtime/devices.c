/*
 * `loom devices`: every registered backend with its device (or why it is
 * unavailable), the OpenCL and CUDA devices present, and whether NVRTC
 * compiles CUDA C. Here, inside the runtime, so that the tool never names
 * a backend.
 */
#include "runtime/backend.h"

#include "core/strbuf.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/opencl/ocl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

loom_status loom_devices_report(loom_ctx *ctx, char **text) {
  loom_strbuf b = {0};
  loom_strbuf_put(&b, "backends:\n");
  const char *names = loom_backend_names();
  while (*names) {
    size_t n = strcspn(names, ",");
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)n, names);
    names += n;
    names += strspn(names, ", ");
    loom_backend *be = NULL;
    if (loom_backend_new(ctx, name, &be) == LOOM_STATUS_OK) {
      char dev[256] = "host CPU";
      if (be->iface->device) be->iface->device(be->context, dev, sizeof dev);
      loom_strbuf_put(&b, "  %-8s %s\n", name, dev);
    } else {
      loom_strbuf_put(&b, "  %-8s unavailable: %s\n", name, loom_ctx_error(ctx));
    }
    loom_backend_free(be);
  }
  char *list = NULL;
  if (loom_ocl_list_devices(ctx, &list) == LOOM_STATUS_OK)
    loom_strbuf_put(&b, "OpenCL devices:\n%s", list[0] ? list : "  (none)\n");
  else
    loom_strbuf_put(&b, "OpenCL: %s\n", loom_ctx_error(ctx));
  free(list);
  list = NULL;
  if (loom_cu_list_devices(ctx, &list) == LOOM_STATUS_OK)
    loom_strbuf_put(&b, "CUDA devices:\n%s", list[0] ? list : "  (none)\n");
  else
    loom_strbuf_put(&b, "CUDA: %s\n", loom_ctx_error(ctx));
  free(list);
  char ver[32];
  if (loom_nvrtc_version(ctx, ver, sizeof ver) == LOOM_STATUS_OK)
    loom_strbuf_put(&b, "NVRTC %s compiles Loom's generated CUDA C\n", ver);
  else
    loom_strbuf_put(&b, "NVRTC: %s\n", loom_ctx_error(ctx));
  *text = loom_strbuf_take(&b);
  return *text ? LOOM_STATUS_OK : loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "devices: out of memory");
}
