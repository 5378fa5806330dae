/* services.c - the compiled-in services, in start order (each is stopped
 * and destroyed in reverse order). */
#include <stddef.h>

#include "broker.h"

extern const struct service_def broker_service;
extern const struct service_def overlay_service;
extern const struct service_def exec_service;
extern const struct service_def tool_service;
extern const struct service_def job_exec_service;
extern const struct service_def job_service;
extern const struct service_def job_io_service;
extern const struct service_def kvs_service;
extern const struct service_def proctable_service;
extern const struct service_def bcast_service;

const struct service_def *const broker_services[] = {
    &broker_service,
    &overlay_service,
    &exec_service,
    &tool_service, /* destroyed after job-exec: see job.h */
    &job_exec_service,
    &job_service,
    &job_io_service,
    &kvs_service,
    &proctable_service,
    &bcast_service,
    NULL,
};
