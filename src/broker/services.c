/* services.c - the compiled-in services, in start order (each is stopped
 * and destroyed in reverse order). */
#include <stddef.h>

#include "broker.h"

extern const struct service_def broker_service;
extern const struct service_def overlay_service;
extern const struct service_def exec_service;

const struct service_def *const broker_services[] = {
    &broker_service,
    &overlay_service,
    &exec_service,
    NULL,
};
