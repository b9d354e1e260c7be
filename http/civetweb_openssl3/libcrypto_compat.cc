// libcrypto.so for civetweb (http/CMakeLists.txt): only a dependency on
// libcrypto.so.3, so that civetweb's dlopen("libcrypto.so") finds it
// without the -dev symlink.
extern "C" {

// Referenced by ipupod_http, so that a program linking it needs this library.
int ipupod_civetweb_libcrypto_compat();
int ipupod_civetweb_libcrypto_compat() { return 3; }

}  // extern "C"
