/*
 * STAND-IN for one of the driver's helper libraries (libnvidia-ptxjitcompiler.so.1): it carries no
 * code, only the version, so the tests can see every libnvidia-* file of a node reach its job steps.
 */
const char warden_fake_driver_version[] = WARDEN_DRIVER_VERSION;
