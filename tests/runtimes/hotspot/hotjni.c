/* The C side of HotJni.java: a JNI function that burns CPU (built by tests/runtimes/test_hotspot.py). */
#include <jni.h>

__attribute__((noinline)) static jlong spin_loop(jlong x, jint n)
{
	for (jint i = 0; i < n; i++) {
		x = x * 6364136223846793005LL + 1442695040888963407LL;
		x ^= (jlong)((unsigned long long)x >> 29);
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

JNIEXPORT jlong JNICALL Java_HotJni_spin(JNIEnv *env, jclass cls, jlong x, jint n)
{
	(void)env;
	(void)cls;
	return spin_loop(x, n);
}
